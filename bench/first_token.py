"""Time to a chat turn's first token while a summary runs on the bundled model, vs with nothing else running.

Summaries and aging calls go to the model server with background priority: it
runs them on a second llama context that pauses between chunks of 64 tokens
while any chat turn is in flight, so a turn shares the cores with at most what
is left of one chunk, instead of waiting for the whole summary (one llama
context per priority: the turn does not queue behind the summary's context,
but both compute at once until that chunk ends). This measures that end to end,
as the app makes the calls: ``Gateway.send`` on the embedded model, over HTTP
to a model server of the benchmark's own (default threads, bench/model_server.py).

The turn: the next turn of a running session: a system prompt and a
conversation of about 1,100 tokens to start with, to which every round adds
its question and the reply, so the server has evaluated all of the prompt but
the newest question, as in a session; ``background=False``, a reply of up to
64 tokens. Its figure is the time from the call to the first text delta. A
new session starts every 10 rounds (its first turn unmeasured), so the
prompts stay between about 1,100 and 2,000 tokens: a turn's own work grows
with its context, which would otherwise dilute the summary's share over a run.

The summary: what a compression sends (the app's summary prompt over about
1,000 tokens of conversation, one user message, up to 256 tokens of reply,
temperature 0, ``background=True``). The two rounds of a pair (below) send
the same summary request, so the summary's time alone and with a turn compare
like for like; each pair summarises another conversation. Before each round a
one-token background request replaces what the summary context holds, so the
server evaluates the summary prompt in full, as it does a new compression's
(it would otherwise reuse the same prompt's evaluation from the round before).

Rounds alternate, in pairs:

- alone: the turn with nothing else running; then, once it ended, the summary
  alone (its time with no turn in its way);
- during a summary: the summary starts, and the turn ``lead`` seconds later
  (spread evenly over 0.1-1.0 s across the rounds, in a shuffled order, so the
  turn lands at every point of a chunk of the summary's prompt evaluation).

Prints p50 and p95 of the time to first token in both, their p95 ratio
(required <= 2.0), the summary's total time alone and with the turn, and a
markdown table (written into docs/benchmarks.md by `make bench`).

    .venv/bin/python bench/first_token.py [--rounds 20] [--reply-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_server import ROOT, BenchModelServer
from report import Report

from engine.core.prompts import PromptMessage, build_summary_prompt
from engine.llm.embedded import MODEL_NAME, EmbeddedBackend
from engine.llm.gateway import Gateway
from engine.llm.types import GREEDY, ChatMessage, ChatRequest

REQUIRED_RATIO = 2.0
NUM_CTX = 4096
# Rounds of one chat session, both kinds alike; it grows by about 80 tokens a round.
SESSION_ROUNDS = 10
SUMMARY_PROMPT_TOKENS = 1_000
SUMMARY_MAX_TOKENS = 256
LEAD_SECONDS = (0.1, 1.0)
CONVERSATIONS = sorted((ROOT / "tests" / "data" / "retention").glob("*.json"))
SYSTEM_PROMPT = "You are a concise project assistant. Answer in one or two sentences."
QUESTIONS = (
    "Who leads this, and what is the deadline?",
    "Which file paths did we mention so far?",
    "What did we lock in, and why?",
    "What is the budget figure we settled on?",
    "What is the next step for tomorrow?",
)


@dataclass(frozen=True)
class Turn:
    first_token: float  # seconds from the call to the first text delta
    seconds: float  # the whole reply
    reply: str


def conversation_turns(path: Path) -> list[tuple[str, str]]:
    return [(turn["user"], turn["assistant"]) for turn in json.loads(path.read_text())["turns"]]


class ChatSession:
    """A running chat: the last conversation as its start, then every round's question and reply.

    A prompt that only grows is what a session sends, and the server's context then holds all of
    it but the new question. The session's number opens its prompt, so a new session shares no
    more than a few tokens with the one before, as two users' sessions would."""

    def __init__(self, number: int) -> None:
        self.messages = [ChatMessage("system", f"Session {number}. {SYSTEM_PROMPT}")]
        for user, assistant in conversation_turns(CONVERSATIONS[-1]):
            self.messages += [ChatMessage("user", user), ChatMessage("assistant", assistant)]

    async def turn(self, gateway: Gateway, number: int, reply_tokens: int) -> Turn:
        question = ChatMessage("user", QUESTIONS[number % len(QUESTIONS)])
        turn = await chat_turn(gateway, [*self.messages, question], reply_tokens)
        self.messages += [question, ChatMessage("assistant", turn.reply)]
        return turn


def summary_messages(pair: int, backend: EmbeddedBackend) -> list[ChatMessage]:
    """A compression's request for pair ``pair``: the summary prompt over the turns of its conversation
    (the turn's own left out), and of the next ones, as many as make SUMMARY_PROMPT_TOKENS."""
    sources = CONVERSATIONS[:-1]
    history: list[PromptMessage] = []
    for index in range(len(sources)):
        for user, assistant in conversation_turns(sources[(pair + index) % len(sources)]):
            history += [PromptMessage("user", user), PromptMessage("assistant", assistant)]
            messages = [ChatMessage("user", build_summary_prompt(history))]
            if backend.count_prompt_tokens(messages) >= SUMMARY_PROMPT_TOKENS:
                return messages
    raise ValueError(f"the conversations hold fewer than {SUMMARY_PROMPT_TOKENS} tokens")


async def chat_turn(gateway: Gateway, messages: list[ChatMessage], reply_tokens: int) -> Turn:
    started = time.perf_counter()
    first: float | None = None
    deltas = []
    stream = gateway.send(ChatRequest(messages, MODEL_NAME, num_ctx=NUM_CTX, max_tokens=reply_tokens, sampling=GREEDY))
    async for delta in stream:
        if first is None:
            first = time.perf_counter()
        deltas.append(delta)
    assert first is not None, "the turn's reply was empty"
    return Turn(first - started, time.perf_counter() - started, "".join(deltas))


async def flush_summary_context(gateway: Gateway) -> None:
    """A one-token background request: the summary context then holds nothing of the last summary."""
    await gateway.complete(
        ChatRequest([ChatMessage("user", "Say OK.")], model=MODEL_NAME, num_ctx=NUM_CTX, max_tokens=1, background=True)
    )


async def summary(gateway: Gateway, messages: list[ChatMessage]) -> float:
    """Seconds for the whole summary, as compression asks for it."""
    started = time.perf_counter()
    await gateway.complete(
        ChatRequest(
            messages, model=MODEL_NAME, num_ctx=NUM_CTX, max_tokens=SUMMARY_MAX_TOKENS, sampling=GREEDY, background=True
        )
    )
    return time.perf_counter() - started


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``share`` of them at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


@dataclass
class Figures:
    turns: list[Turn]
    turn_prompt_tokens: list[int]
    summaries: list[float]  # seconds, client side
    summary_prompt_tokens: list[int]
    summary_reply_tokens: list[int]

    def row(self, label: str) -> str:
        firsts = [turn.first_token for turn in self.turns]
        return (
            f"| {label} | {len(self.turns)} | {statistics.median(firsts) * 1000:,.0f} ms "
            f"| {percentile(firsts, 0.95) * 1000:,.0f} ms "
            f"| {statistics.median(turn.seconds for turn in self.turns):.2f} s "
            f"| {statistics.median(self.summaries):.1f} s | {percentile(self.summaries, 0.95):.1f} s |"
        )


async def measure(
    gateway: Gateway,
    server: BenchModelServer,
    summaries: list[list[ChatMessage]],
    rounds: int,
    reply_tokens: int,
) -> tuple[Figures, Figures, int]:
    """Alternating rounds, alone first; the figures alone, during a summary, and how many rounds' summary
    ended before their turn did (none should: the turn is to run all through a summary)."""
    alone, during = Figures([], [], [], [], []), Figures([], [], [], [], [])
    leads = [LEAD_SECONDS[0] + (LEAD_SECONDS[1] - LEAD_SECONDS[0]) * i / max(rounds - 1, 1) for i in range(rounds)]
    random.Random(0).shuffle(leads)
    missed = 0
    await summary(gateway, summaries[0])  # warm: the summary context's first evaluation
    for number in range(1, 2 * rounds + 1):
        if number % SESSION_ROUNDS == 1:
            session = ChatSession(number // SESSION_ROUNDS)
            # Its start evaluated once, unmeasured: each measured turn then evaluates its new question.
            await session.turn(gateway, 0, reply_tokens)
        await flush_summary_context(gateway)
        server.clear()
        messages = summaries[(number + 1) // 2]
        if number % 2:
            figures, label = alone, "alone"
            figures.turns.append(await session.turn(gateway, number, reply_tokens))
            figures.summaries.append(await summary(gateway, messages))
        else:
            lead = leads[number // 2 - 1]
            figures, label = during, f"{lead:.2f} s into a summary"
            running = asyncio.create_task(summary(gateway, messages))
            await asyncio.sleep(lead)
            figures.turns.append(await session.turn(gateway, number, reply_tokens))
            missed += running.done()
            figures.summaries.append(await running)
        served = {entry.priority: entry for entry in server.wait_served(2)}
        assert sorted(served) == ["background", "interactive"], served
        figures.turn_prompt_tokens.append(served["interactive"].prompt_tokens)
        figures.summary_prompt_tokens.append(served["background"].prompt_tokens)
        figures.summary_reply_tokens.append(served["background"].completion_tokens)
        print(
            f"round {number:>2} {label:<20}: {served['interactive'].prompt_tokens:,}-token prompt, first token "
            f"{figures.turns[-1].first_token * 1000:6,.0f} ms, summary {figures.summaries[-1]:5.1f} s "
            f"({served['background'].prompt_tokens:,} + {served['background'].completion_tokens} tokens)",
            flush=True,
        )
    return alone, during, missed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20, help="rounds of each kind (they alternate)")
    parser.add_argument("--reply-tokens", type=int, default=64, help="the turn's reply cap")
    args = parser.parse_args()
    report = Report("first_token")
    with BenchModelServer() as server:
        backend = EmbeddedBackend(host=server.url)
        gateway = Gateway(mode="embedded", embedded=backend, ollama=None)
        summaries = [summary_messages(pair, backend) for pair in range(args.rounds + 1)]
        alone, during, missed = asyncio.run(measure(gateway, server, summaries, args.rounds, args.reply_tokens))
        threads = server.threads_used()
    prompts = alone.turn_prompt_tokens + during.turn_prompt_tokens
    p95_alone = percentile([turn.first_token for turn in alone.turns], 0.95)
    p95_during = percentile([turn.first_token for turn in during.turns], 0.95)
    ratio = p95_during / p95_alone
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average: {', '.join(f'{load:.1f}' for load in os.getloadavg())}; model server: {threads} threads")
    summary_prompt = statistics.median(alone.summary_prompt_tokens)
    summary_reply = statistics.median(alone.summary_reply_tokens + during.summary_reply_tokens)
    report.print(
        f"model: {MODEL_NAME}; turn: {min(prompts):,}-{max(prompts):,}-token prompts in sessions of "
        f"{SESSION_ROUNDS} rounds, up to {args.reply_tokens}-token replies; summary: {summary_prompt:,.0f}-token "
        f"prompt (p50), {summary_reply:.0f}-token reply (p50, cap {SUMMARY_MAX_TOKENS}); "
        f"turn started {LEAD_SECONDS[0]}-{LEAD_SECONDS[1]} s after the summary"
    )
    report.print(f"\n== time to a turn's first token, {args.rounds} rounds of each, alternating")
    report.print(
        "| the turn runs | rounds | first token p50 | first token p95 | whole turn p50 | summary p50 | summary p95 |"
    )
    report.print("|---|---:|---:|---:|---:|---:|---:|")
    report.print(alone.row("alone"))
    report.print(during.row("during a summary"))
    report.print(
        "summary: its whole time as the caller sees it; in the rounds of the turn alone it ran after the turn, alone"
    )
    report.print(
        f"first-token p95 during a summary / alone: {ratio:.2f} (required <= {REQUIRED_RATIO}); "
        f"summary time with a turn / alone (p50): "
        f"{statistics.median(during.summaries) / statistics.median(alone.summaries):.2f}"
    )
    if missed:
        report.print(f"warning: in {missed} round(s) the summary had ended before the turn did")
    report.save()
    return 0 if ratio <= REQUIRED_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
