"""Memory of everyday conversations: do the answers to questions about a long chat stay in the prompt?

The evaluation set is tests/data/everyday/ (see its README): long chats between two people over
months (hundreds of dated messages: family, places, pets, work, books and games, health, plans,
events), each with questions whose answer stands word for word in a message. It was written
without reading the code it measures, and is split in two halves: ``tune/`` may guide changes,
``test/`` only measures. This benchmark reports on ``test/`` unless told otherwise.

Each chat is imported as an OLLM session file (one person as the user, the other as the
assistant, every message with its date) into a session of each size, compressed by the product
(``compression_run``, the real bundled model in a model server of the benchmark's own, the
session's own strategy) until no compression is due, and the next prompt is read:

- (a) after compression: the share of all answers that stand in the prompt, and of the answers
  whose message left the context;
- (b) with the question as the next message: the prompt the next turn would send for it
  (``session_prompt_for``: the context, the recall block, the question);
- (c) plain truncation at the same budget: the newest messages that fit the prompt's room (what
  Ollama does silently);
- (d) the full conversation, as a reference.

An answer is found when it stands in the prompt as a whole (case and runs of space aside). Date
questions ("when did…", answered by a calendar date the chat only says relatively) are counted
apart: no truncated chat can hold their answer. Also: how full the prompt is after compression
(it must stay at or over half the context while the chat is longer than that), and the
retention the product shows beside this benchmark's share of answers kept.

    .venv/bin/python bench/everyday.py [--sizes 4096 8192 16384] [--set everyday/test]
        [--conversations N] [--strategy summarize|truncate] [--ollama-host URL --model NAME]

``--ollama-host`` runs it against a model of an Ollama host instead of the bundled one, so that a model
able to summarize (3B or more, whose summary prompt asks for the facts with whom and when) can be
measured where one runs.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import ROOT, setup_django, use_model_server

setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

from chat.models import Message, Session  # noqa: E402
from chat.selectors.context import active_checkpoints, session_budget  # noqa: E402
from chat.selectors.prompt import session_prompt  # noqa: E402
from chat.selectors.recall import session_prompt_for  # noqa: E402
from chat.services.compression import compression_run  # noqa: E402
from chat.services.files import session_file_import  # noqa: E402
from engine.core.budget import prompt_room  # noqa: E402
from engine.llm.embedded import MODEL_NAME, EmbeddedBackend  # noqa: E402
from engine.llm.gateway import Gateway  # noqa: E402
from engine.llm.ollama_backend import OllamaBackend  # noqa: E402

DATA = ROOT / "tests" / "data"
# The targets at 8K on the held-out half.
TARGET_SIZE = 8192
LEFT_TARGET = 0.5
RECALL_TARGET = 0.8
# How far the retention the product shows may be from this benchmark's share of the answers kept.
FIGURE_GAP = 0.1


@dataclass
class Tally:
    questions: int = 0
    after: int = 0
    left: int = 0
    left_after: int = 0
    recalled: int = 0
    truncated: int = 0
    full: int = 0
    dates: int = 0
    dates_after: int = 0
    dates_recalled: int = 0
    fills: list[float] = field(default_factory=list)
    beaten: list[tuple[str, int, int]] = field(default_factory=list)  # name, after, truncated
    shown: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)
    under_half: int = 0


def _flat(text: str) -> str:
    return " ".join(text.casefold().replace("*", "").replace("’", "'").split())


def found(answer: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(_flat(answer))}(?!\w)", _flat(text)) is not None


def session_file(conversation: dict[str, Any], model: str) -> dict[str, Any]:
    """The chat as the OLLM CLI records a session of ``model``."""
    messages = conversation["messages"]
    return {
        "sessionId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"ollm-site/everyday/{conversation['name']}")),
        "startTime": messages[0]["timestamp"],
        "lastActivity": messages[-1]["timestamp"],
        "model": model,
        "provider": "local",
        "messages": [
            {"role": m["role"], "parts": [{"type": "text", "text": m["content"]}], "timestamp": m["timestamp"]}
            for m in messages
        ],
        "toolCalls": [],
        "metadata": {"title": conversation["name"]},
    }


def _prompt_text(prompt: Any) -> str:
    return "\n".join(block.content for block in prompt.blocks)


def _truncated(session: Session) -> str:
    """The newest messages that fit the prompt's room, as a client without compression would send."""
    room = prompt_room(session.max_tokens)
    kept: list[str] = []
    for content, tokens in (
        Message.objects.filter(session=session).order_by("-position").values_list("content", "tokens")
    ):
        if tokens > room:
            break
        room -= tokens
        kept.append(content)
    return "\n".join(reversed(kept))


def run(
    size: int, gateway: Gateway, owner: Any, conversation: dict[str, Any], tally: Tally, strategy: str, model: str
) -> None:
    imported = session_file_import(
        owner=owner, data=session_file(conversation, model), context_size=size, on_existing="copy", gateway=gateway
    )
    session = imported.session
    Session.objects.filter(pk=session.pk).update(settings={"compression": {"strategy": strategy}})
    for _ in range(6):
        if not session_budget(session=session).compression_due:
            break
        compression_run(session_id=session.pk, reason="bench", force=True, gateway=gateway)
    session.refresh_from_db()
    prompt = session_prompt(session=session, gateway=gateway)
    after = _prompt_text(prompt)
    whole = sum(m.tokens for m in Message.objects.filter(session=session))
    tally.fills.append(prompt.total_tokens / session.max_tokens)
    if whole > session.max_tokens and prompt.total_tokens < session.max_tokens / 2:
        tally.under_half += 1
    truncated = _truncated(session)
    full = "\n".join(Message.objects.filter(session=session).order_by("position").values_list("content", flat=True))
    positions = list(Message.objects.filter(session=session).order_by("position").values_list("position", "id"))
    left_ids = set(Message.objects.filter(session=session, compressed_into__isnull=False).values_list("id", flat=True))
    by_index = [pk for _, pk in positions]
    kept_here = truncated_here = 0
    for question in conversation["questions"]:
        answer = question["answer"]
        next_prompt = _prompt_text(session_prompt_for(session=session, draft=question["question"], gateway=gateway))
        if question.get("verbatim", True) is False:
            tally.dates += 1
            tally.dates_after += found(answer, after)
            tally.dates_recalled += found(answer, next_prompt)
            continue
        tally.questions += 1
        in_after = found(answer, after)
        kept_here += in_after
        tally.after += in_after
        tally.recalled += found(answer, next_prompt)
        in_truncated = found(answer, truncated)
        truncated_here += in_truncated
        tally.truncated += in_truncated
        tally.full += found(answer, full)
        if all(by_index[i] in left_ids for i in question["evidence"]):
            tally.left += 1
            tally.left_after += in_after
    tally.beaten.append((conversation["name"], kept_here, truncated_here))
    checkpoints = [cp for cp in active_checkpoints(session=session) if cp.retention is not None]
    if checkpoints:
        tally.shown.append(statistics.mean(cp.retention or 0.0 for cp in checkpoints))
        left_questions = [
            q for q in conversation["questions"]
            if q.get("verbatim", True) and all(by_index[i] in left_ids for i in q["evidence"])
        ]  # fmt: skip
        if left_questions:
            tally.measured.append(sum(found(q["answer"], after) for q in left_questions) / len(left_questions))


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.2f} ({part}/{whole})" if whole else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    parser.add_argument("--set", default="everyday/test", help="a folder of tests/data/")
    parser.add_argument("--conversations", type=int, help="only the first N conversations (a quick check)")
    parser.add_argument("--strategy", default="summarize", choices=["summarize", "truncate"])
    parser.add_argument("--ollama-host", help="an Ollama host to run a model of instead of the bundled one")
    parser.add_argument("--model", help="the model of --ollama-host")
    args = parser.parse_args()
    if bool(args.ollama_host) != bool(args.model):
        parser.error("--ollama-host and --model go together")
    report = Report("everyday")
    paths = sorted((DATA / args.set).glob("*.json"))[: args.conversations]
    conversations = [json.loads(path.read_text()) for path in paths]
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user("bench")
    failed = []
    model = args.model or MODEL_NAME
    with BenchModelServer(n_ctx=max(args.sizes)) as server:
        use_model_server(server.url)
        gateway = Gateway(mode="embedded", embedded=EmbeddedBackend(host=server.url), ollama=None)
        if args.ollama_host:
            gateway = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=args.ollama_host))
        report.print(
            f"Answers to the questions about {len(paths)} chats of tests/data/{args.set}/ "
            f"({sum(len(c['messages']) for c in conversations)} messages), looked for in the prompt; "
            f"strategy {args.strategy}, {model}"
        )
        report.print(
            "| size | (a) after compression | (a) of those that left the context | (b) question next, recall "
            "| (c) plain truncation | (d) full chat | dates: (a), (b) | prompt after compression "
            "| chats where (a) > (c) | product's figure, benchmark's | time |"
        )
        report.print("|---|---|---|---|---|---|---|---|---|---|---|")
        per_chat: list[str] = []
        for size in args.sizes:
            started = time.perf_counter()
            tally = Tally()
            for conversation in conversations:
                run(size, gateway, owner, conversation, tally, args.strategy, model)
            wins = sum(after > truncated for _, after, truncated in tally.beaten)
            shown = statistics.mean(tally.shown) if tally.shown else 1.0
            measured = statistics.mean(tally.measured) if tally.measured else 1.0
            report.print(
                f"| {size} | {_share(tally.after, tally.questions)} | {_share(tally.left_after, tally.left)} "
                f"| {_share(tally.recalled, tally.questions)} | {_share(tally.truncated, tally.questions)} "
                f"| {_share(tally.full, tally.questions)} "
                f"| {_share(tally.dates_after, tally.dates)}, {_share(tally.dates_recalled, tally.dates)} "
                f"| {min(tally.fills):.0%}–{max(tally.fills):.0%} of the context | {wins} of {len(tally.beaten)} "
                f"| {shown:.2f}, {measured:.2f} | {time.perf_counter() - started:.0f} s |"
            )
            per_chat += [
                f"- {size}, {name}: {after} after compression, {truncated} by truncation"
                for name, after, truncated in tally.beaten
            ]
            if abs(shown - measured) > FIGURE_GAP:
                failed.append(f"the product's figure is {shown:.2f} at {size}, the answers kept {measured:.2f}")
            if tally.under_half:
                failed.append(f"{tally.under_half} prompts under half the context after compression at {size}")
            if size == TARGET_SIZE:
                if wins < len(tally.beaten):
                    failed.append(f"truncation held as many answers on {len(tally.beaten) - wins} chats at {size}")
                kept = tally.left_after / tally.left if tally.left else 1.0
                if kept < LEFT_TARGET:
                    failed.append(f"{kept:.2f} of the answers that left the context kept, under {LEFT_TARGET}")
                if tally.questions and tally.recalled / tally.questions < RECALL_TARGET:
                    failed.append(f"{tally.recalled / tally.questions:.2f} with recall, under {RECALL_TARGET}")
    report.print("")
    report.print("Answers in the prompt, per chat:")
    report.print("")
    for line in per_chat:
        report.print(line)
    report.print("")
    report.print(
        f"targets at {TARGET_SIZE}: (a) > (c) on every chat, (a) of those that left >= {LEFT_TARGET}, "
        f"(b) >= {RECALL_TARGET}; at every size: the prompt at half the context or more after compression, "
        f"the product's figure within {FIGURE_GAP} of the answers kept"
    )
    for failure in failed:
        report.print(f"requirement not met: {failure}")
    report.save()
    if failed:
        raise SystemExit("; ".join(failed))


if __name__ == "__main__":
    main()
