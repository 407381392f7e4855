"""Facts that survive compression, measured on the next prompt.

Each conversation of an evaluation set (tests/data/retention_prose/ by default: facts
in user and assistant turns, in prose and in code) is stored turn by turn in a
fresh session of each size, with the reply markers applied and the locked
decisions recorded as a user would. Then the conversation goes on with filler
turns that state no fact, until it has been compressed ``--compressions`` times by
the real SmolLM2 model, at the session's own (tier) settings. After every
compression the next prompt is read, and every fact of every message that has
left the active context (user messages included) is looked up in it:

- with the ledger: the prompt as it is sent;
- summary alone: the same prompt with the checkpoints' ledgers left out.

Also printed: the retention recorded per aging level (each revision, measured on
the prompt), the locked decisions found in the last prompt (all must be), and the
share of the context the ledgers take. The model runs in a model server of the
benchmark's own (bench/model_server.py).

    .venv/bin/python bench/retention.py [--sizes 2048 4096 8192 16384] [--set retention_prose]
        [--conversations N] [--compressions 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import ROOT, setup_django, use_model_server

setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

import contextmgr.services.compression as compression  # noqa: E402
from chat.models import Message, Session  # noqa: E402
from chat.services import message_create, session_create  # noqa: E402
from contextmgr.core.aging import Level  # noqa: E402
from contextmgr.core.ledger import render_ledger  # noqa: E402
from contextmgr.core.retention import extract_facts, measure_retention  # noqa: E402
from contextmgr.core.window import chat_messages, render_checkpoint  # noqa: E402
from contextmgr.llm.embedded import MODEL_NAME, EmbeddedBackend  # noqa: E402
from contextmgr.llm.gateway import Gateway  # noqa: E402
from contextmgr.models import CheckpointRevision  # noqa: E402
from contextmgr.resources import count_text_tokens  # noqa: E402
from contextmgr.selectors import (  # noqa: E402
    active_checkpoints,
    checkpoint_view,
    session_budget,
    session_window,
)
from contextmgr.services.goals import decision_record, goal_apply_markers  # noqa: E402

DATA = ROOT / "tests" / "data"
# The targets for the share found with the ledger: 2K is the hardest.
TARGETS = {2048: 0.80}
TARGET_FROM_4K = 0.90
# Turns that state no fact, so that what is measured is what the conversation said before them.
FILLER_USER = "Go on, and keep it general."
FILLER_ASSISTANT = (
    "Sure. In general it helps to keep each step small, to write down what was agreed and why, "
    "and to check the result with the people who depend on it before moving on. When something "
    "is unclear, it is better to ask early than to guess, and when a plan changes, everyone should "
    "hear about it at the same time. Most delays come from waiting on answers rather than from the "
    "work itself, so short and frequent check-ins tend to pay off over a long project."
)


@dataclass
class Tally:
    with_ledger: list[float] = field(default_factory=list)
    summary_alone: list[float] = field(default_factory=list)
    by_level: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    locked_total: int = 0
    locked_kept: int = 0
    ledger_share: list[float] = field(default_factory=list)
    compressions: int = 0


def _prompt(session: Session, *, ledger: bool) -> str:
    if ledger:
        return "\n".join(content for _, content in chat_messages(session_window(session=session)))
    blocks = [b for b in session_window(session=session) if b.kind != "checkpoint"]
    without = [render_checkpoint(replace(checkpoint_view(cp), ledger=())) for cp in active_checkpoints(session=session)]
    return "\n".join([blocks[0].content, *without, *(b.content for b in blocks[1:])])


def _measure(session: Session, tally: Tally) -> None:
    left = Message.objects.filter(session=session, compressed_into__isnull=False).order_by("position")
    facts = extract_facts(m.content for m in left)
    tally.with_ledger.append(measure_retention(facts, _prompt(session, ledger=True)).score)
    tally.summary_alone.append(measure_retention(facts, _prompt(session, ledger=False)).score)
    ledgers = [render_ledger(text for _, text in cp.ledger) for cp in active_checkpoints(session=session)]
    tally.ledger_share.append(sum(count_text_tokens(text) for text in ledgers if text) / session.max_tokens)


def run(size: int, gateway: Gateway, owner: Any, conversation: dict[str, Any], tally: Tally, target: int) -> None:
    session = session_create(owner=owner, model=MODEL_NAME, context_size=size, title=conversation["name"])
    for decision in conversation["locked_decisions"]:
        decision_record(session=session, description=decision, locked=True)

    def compress_if_due() -> None:
        if session_budget(session=session).compression_due:
            outcome = compression.compression_run(session_id=session.pk, reason="due", gateway=gateway)
            if outcome.status in ("compressed", "rolled-over"):
                tally.compressions += 1
                _measure(session, tally)

    for turn in conversation["turns"]:
        message_create(session=session, role="user", content=turn["user"])
        message_create(session=session, role="assistant", content=turn["assistant"])
        goal_apply_markers(session=session, text=turn["assistant"])
        compress_if_due()
    done = session.compression_count
    for _ in range(2000):
        if Session.objects.get(pk=session.pk).compression_count >= done + target:
            break
        message_create(session=session, role="user", content=FILLER_USER)
        message_create(session=session, role="assistant", content=FILLER_ASSISTANT)
        compress_if_due()
        session.refresh_from_db()
    for revision in CheckpointRevision.objects.filter(checkpoint__session=session):
        if revision.facts_total:
            tally.by_level[revision.level].append(revision.retention or 0.0)
    prompt = _prompt(session, ledger=True)
    tally.locked_total += len(conversation["locked_decisions"])
    tally.locked_kept += sum(1 for decision in conversation["locked_decisions"] if decision in prompt)


def _mean(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--set", default="retention_prose", help="a folder of tests/data/")
    parser.add_argument("--conversations", type=int, help="only the first N conversations (a quick check)")
    parser.add_argument("--compressions", type=int, default=3, help="compressions after the conversation's turns")
    args = parser.parse_args()
    report = Report("retention")
    paths = sorted((DATA / args.set).glob("*.json"))[: args.conversations]
    conversations = [json.loads(path.read_text()) for path in paths]
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user("bench")
    failed = []
    with BenchModelServer(n_ctx=max(args.sizes)) as server:
        use_model_server(server.url)
        gateway = Gateway(mode="embedded", embedded=EmbeddedBackend(host=server.url), ollama=None)
        report.print(
            f"Facts of the messages that left the context, found in the next prompt: {len(paths)} conversations "
            f"of tests/data/{args.set}/, {args.compressions} compressions after their turns, {MODEL_NAME}"
        )
        report.print(
            "| size | compressions | with the ledger | summary alone | by level (revisions) "
            "| locked decisions kept | ledger share of the context | time |"
        )
        report.print("|---|---|---|---|---|---|---|---|")
        for size in args.sizes:
            started = time.perf_counter()
            tally = Tally()
            for conversation in conversations:
                run(size, gateway, owner, conversation, tally, args.compressions)
            levels = ", ".join(
                f"{Level(level).label} {_mean(scores)} ({len(scores)})"
                for level, scores in sorted(tally.by_level.items(), reverse=True)
            )
            report.print(
                f"| {size} | {tally.compressions} | {_mean(tally.with_ledger)} | {_mean(tally.summary_alone)} "
                f"| {levels} | {tally.locked_kept}/{tally.locked_total} "
                f"| {100 * statistics.mean(tally.ledger_share or [0.0]):.1f}% "
                f"| {time.perf_counter() - started:.0f} s |"
            )
            wanted = TARGETS.get(size, TARGET_FROM_4K)
            if tally.with_ledger and statistics.mean(tally.with_ledger) < wanted:
                failed.append(f"{_mean(tally.with_ledger)} of the facts kept at {size}, under the target {wanted}")
            if tally.locked_kept != tally.locked_total:
                failed.append(f"locked decisions lost at {size}: {tally.locked_kept}/{tally.locked_total}")
    targets = ", ".join(f"{value:.2f} at {size}" for size, value in sorted(TARGETS.items()))
    report.print(f"targets (with the ledger): {targets}, {TARGET_FROM_4K:.2f} from 4K up; every locked decision kept")
    for failure in failed:
        report.print(f"requirement not met: {failure}")
    report.save()
    if failed:
        raise SystemExit("; ".join(failed))


if __name__ == "__main__":
    main()
