"""How often the bundled model's replies loop, with the old sampling and with the new defaults.

Each prompt of bench/data/loop_prompts.json (questions of the kind users ask:
explanations, lists, stories, code…) is sent alone, as a chat turn's
first message, to a model server of the benchmark's own through the app's
backend, for at most 256 tokens, with each sampling in turn:

- greedy: temperature 0 and no repeat penalty, what the model was asked for before;
- the old chat default: temperature 0.7 and no repeat penalty (``OLLM_CHAT_TEMPERATURE``);
- the new default: no sampling option sent, so the server's (Ollama's): temperature
  0.8, top_k 40, top_p 0.9, repeat_penalty 1.1 over the last 64 tokens.

A reply loops when a phrase of 5 words comes back 3 times or more
(``core.repetition.most_repeated_phrase``); the product's own detector
(``core.repetition.repetition``, 6-word phrases, lines, short units) is shown
beside it. The prompts are split into a tuning half and a test half: sampling
may be tuned on ``tune`` only, and the requirement (under 5% of the new
default's replies loop) is read on ``test``.

    .venv/bin/python bench/loops.py [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_server import BenchModelServer
from report import Report

from engine.core.repetition import RepeatedPhrase, most_repeated_phrase, repetition
from engine.llm import ChatMessage, ChatRequest, Sampling
from engine.llm.embedded import MODEL_NAME, EmbeddedBackend

PROMPTS = Path(__file__).resolve().parent / "data" / "loop_prompts.json"
PHRASE_WORDS = 5
LOOP_REPEATS = 3
REQUIRED_SHARE = 0.05
NUM_CTX = 2048
SAMPLINGS = {
    "greedy, no repeat penalty (before)": Sampling(temperature=0.0, repeat_penalty=1.0),
    "temperature 0.7, no repeat penalty (the old chat default)": Sampling(temperature=0.7, repeat_penalty=1.0),
    "the server's defaults (after)": Sampling(),
}
AFTER = "the server's defaults (after)"


@dataclass(frozen=True)
class Reply:
    split: str
    prompt: str
    text: str
    tokens: int
    capped: bool

    @property
    def repeat(self) -> RepeatedPhrase | None:
        return most_repeated_phrase(self.text, words=PHRASE_WORDS)

    @property
    def loops(self) -> bool:
        return self.repeat is not None and self.repeat.count >= LOOP_REPEATS


async def answer(backend: EmbeddedBackend, prompt: str, sampling: Sampling, max_tokens: int) -> tuple[str, int, bool]:
    stream = backend.chat(
        ChatRequest(
            [ChatMessage("user", prompt)], model=MODEL_NAME, num_ctx=NUM_CTX, max_tokens=max_tokens, sampling=sampling
        )
    )
    completion = await stream.collect()
    return completion.text, completion.result.completion_tokens, completion.result.done_reason == "length"


def row(label: str, replies: list[Reply]) -> str:
    looping = [reply for reply in replies if reply.loops]
    repeats = [reply.repeat for reply in replies if reply.repeat is not None]
    most = max(repeats, key=lambda repeat: repeat.count, default=None)
    most_text = f"{most.count}× a {len(most.words)}-word phrase" if most is not None else "none"
    flagged = sum(repetition(reply.text) is not None for reply in replies)
    capped = sum(reply.capped for reply in replies)
    return (
        f"| {label} | {len(replies)} | {len(looping)} ({len(looping) / len(replies):.0%}) | {most_text} "
        f"| {flagged} | {capped} | {sum(reply.tokens for reply in replies) / len(replies):.0f} |"
    )


async def run(max_tokens: int) -> int:
    prompts = json.loads(PROMPTS.read_text())["prompts"]
    report = Report("loops")
    results: dict[str, list[Reply]] = {label: [] for label in SAMPLINGS}
    # What is measured is text, not speed: one thread keeps a shared machine from slowing it to a crawl.
    with BenchModelServer(n_ctx=NUM_CTX, threads=1) as server:
        backend = EmbeddedBackend(host=server.url, timeout=600)
        for number, prompt in enumerate(prompts, 1):
            for label, sampling in SAMPLINGS.items():
                text, tokens, capped = await answer(backend, prompt["text"], sampling, max_tokens)
                results[label].append(Reply(prompt["split"], prompt["text"], text, tokens, capped))
            print(f"{number}/{len(prompts)} {prompt['text']}", flush=True)
    report.print(
        f"{len(prompts)} prompts (bench/data/loop_prompts.json), {MODEL_NAME}, at most {max_tokens} tokens each, "
        f"num_ctx {NUM_CTX}. A reply loops when a {PHRASE_WORDS}-word phrase comes {LOOP_REPEATS} times or more; "
        '"most repeats": the most times one phrase of 5 words or more comes back in a reply; "detector": replies '
        "the product's repetition check flags."
    )
    for half in ("test", "tune"):
        report.print(f"== {half} half")
        report.print("| sampling | replies | loop (5 words ×3) | most repeats | detector | hit the cap | mean tokens |")
        report.print("|---|---|---|---|---|---|---|")
        for label, replies in results.items():
            report.print(row(label, [reply for reply in replies if reply.split == half]))
    for label, replies in results.items():
        for reply in replies:
            if reply.loops and reply.repeat is not None:
                print(f"[{label}] {reply.prompt}: {reply.repeat.count}× “{' '.join(reply.repeat.words)}”")
    after = [reply for reply in results[AFTER] if reply.split == "test"]
    share = sum(reply.loops for reply in after) / len(after)
    failed = share >= REQUIRED_SHARE
    if failed:
        report.print(f"requirement not met: {share:.0%} of the new default's replies on the test half loop")
    report.save()
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(run(args.max_tokens)))


if __name__ == "__main__":
    main()
