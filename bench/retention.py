"""Measured retention on the evaluation set in tests/data/retention/.

Each conversation (planted figures, file paths, names and locked decisions)
is stored turn by turn in a fresh session at 2K and at 4K (twice and three
times over, so the budget's trigger is passed), with the reply
markers applied as in a real turn, and compressed by the real SmolLM2 model
whenever the budget calls for it, then once more at the end. Prints the mean
retention per checkpoint level (every revision, measured against the facts
of the messages it stands for) and how many locked decisions are still in
the next prompt (all of them must be: they are pinned, never compressed).
The model runs in a model server of the benchmark's own (bench/model_server.py).

    .venv/bin/python bench/retention.py [--sizes 2048 4096] [--conversations N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import ROOT, setup_django, use_model_server

setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from model_server import BenchModelServer  # noqa: E402

import contextmgr.services.compression as compression  # noqa: E402
from chat.services import message_create, session_create  # noqa: E402
from contextmgr.core.aging import Level  # noqa: E402
from contextmgr.core.window import chat_messages  # noqa: E402
from contextmgr.llm.embedded import MODEL_NAME, EmbeddedBackend  # noqa: E402
from contextmgr.llm.gateway import Gateway  # noqa: E402
from contextmgr.models import CheckpointRevision, ContextEvent  # noqa: E402
from contextmgr.selectors import session_budget, session_window  # noqa: E402
from contextmgr.services.goals import goal_apply_markers  # noqa: E402

DATA = ROOT / "tests" / "data" / "retention"


def run(
    size: int, gateway: Gateway, owner: Any, paths: list[Path]
) -> tuple[dict[int, list[float]], int, int, list[float]]:
    """Each conversation stored and compressed at ``size``: retention by level, the locked decisions
    and how many the next prompt keeps, and each first attempt's retention."""
    by_level: dict[int, list[float]] = defaultdict(list)
    locked_total = locked_kept = 0
    firsts: list[float] = []
    for path in paths:
        conversation = json.loads(path.read_text())
        session = session_create(
            owner=owner,
            model=MODEL_NAME,
            context_size=size,
            title=conversation["name"],
            settings={"compression": {"summary_max_tokens": 256, "preserve_recent": 256}},
        )
        # Long enough to pass the trigger: the conversation goes on with the same turns again.
        passes = 2 if size <= 2048 else 3
        for turn in conversation["turns"] * passes:
            message_create(session=session, role="user", content=turn["user"])
            message_create(session=session, role="assistant", content=turn["assistant"])
            goal_apply_markers(session=session, text=turn["assistant"])
            if session_budget(session=session).compression_due:
                compression.compression_run(session_id=session.pk, reason="due", gateway=gateway)
        compression.compression_run(session_id=session.pk, reason="final", gateway=gateway, force=True)
        for revision in CheckpointRevision.objects.filter(checkpoint__session=session):
            if revision.facts_total:
                by_level[revision.level].append(revision.retention or 0.0)
        for event in ContextEvent.objects.filter(session=session, type__in=["compressed", "rollover-complete"]):
            if "retention_first" in event.payload:
                firsts.append(event.payload["retention_first"])
        prompt = "\n".join(content for _, content in chat_messages(session_window(session=session)))
        locked_total += len(conversation["locked_decisions"])
        locked_kept += sum(1 for decision in conversation["locked_decisions"] if decision in prompt)
    return by_level, locked_total, locked_kept, firsts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--conversations", type=int, help="only the first N conversations (a quick check)")
    args = parser.parse_args()
    paths = sorted(DATA.glob("*.json"))[: args.conversations]
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user("bench")
    with BenchModelServer(n_ctx=4096) as server:
        use_model_server(server.url)
        gateway = Gateway(mode="embedded", embedded=EmbeddedBackend(host=server.url), ollama=None)
        print(f"Retention on {len(paths)} conversations ({MODEL_NAME}, compressions by the real model)")
        print("| size | level | revisions | mean retention | first attempt | locked decisions kept | time |")
        print("|---|---|---|---|---|---|---|")
        for size in args.sizes:
            started = time.perf_counter()
            by_level, locked_total, locked_kept, firsts = run(size, gateway, owner, paths)
            elapsed = time.perf_counter() - started
            first = f"{statistics.mean(firsts):.2f}" if firsts else "-"
            for level in sorted(by_level, reverse=True):
                scores = by_level[level]
                print(
                    f"| {size} | {Level(level).label} | {len(scores)} | {statistics.mean(scores):.2f} | {first} "
                    f"| {locked_kept}/{locked_total} | {elapsed:.0f} s |"
                )
            if locked_kept != locked_total:
                raise SystemExit(f"locked decisions lost at {size}: {locked_kept}/{locked_total}")


if __name__ == "__main__":
    main()
