"""What a self-contained snapshot costs: its stored size and the time to take and restore it.

A session of each size is stored in bulk (the older half of its messages compressed
into checkpoints of 50 messages, as after many compressions), then snapshot_create
and snapshot_restore run on it. Printed per size: the bytes of the snapshot's state
as stored, those of its message states alone, and the milliseconds to take and to
restore it (median of --repeat runs). It decided that every snapshot holds every
message's state rather than what changed since the previous one (see docs/benchmarks.md).

    .venv/bin/python bench/snapshot_size.py [--sizes 100 1000 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django
from report import Report

setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from chat.models import Checkpoint, Message, Session, Snapshot  # noqa: E402  # noqa: E402
from chat.services.sessions import session_create  # noqa: E402
from chat.services.snapshots import snapshot_create, snapshot_restore  # noqa: E402

BLOCK = 50  # messages per checkpoint


def stored_session(user: Any, messages: int) -> Session:
    session = session_create(owner=user, title=f"{messages} messages", model="smollm2", context_size=8192)
    compressed = messages // 2
    checkpoints = Checkpoint.objects.bulk_create(
        Checkpoint(
            session=session,
            number=b + 1,
            level=3,
            first_position=b * BLOCK + 1,
            last_position=(b + 1) * BLOCK,
            summary=f"Summary of block {b + 1}.",
            original_tokens=2_000,
            current_tokens=120,
        )
        for b in range(compressed // BLOCK)
    )
    Message.objects.bulk_create(
        (
            Message(
                session=session,
                position=i + 1,
                role=Message.Role.USER if i % 2 == 0 else Message.Role.ASSISTANT,
                content=f"Message number {i + 1}.",
                tokens=40,
                compressed_into=checkpoints[i // BLOCK] if i < len(checkpoints) * BLOCK else None,
            )
            for i in range(messages)
        ),
        batch_size=5_000,
    )
    return session


def median_ms(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    report = Report("snapshot_size")
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-only-password")
    report.print("| messages | state (bytes) | of which message states | take (ms) | restore (ms) |")
    report.print("|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        session = stored_session(user, size)
        take = median_ms(partial(snapshot_create, session=session, kind=Snapshot.Kind.MANUAL), args.repeat)
        snapshot = Snapshot.objects.filter(session=session).order_by("id").first()
        assert snapshot is not None
        restore = median_ms(partial(snapshot_restore, snapshot=snapshot), args.repeat)
        with connection.cursor() as cursor:
            cursor.execute("SELECT length(state) FROM contextmgr_snapshot WHERE id = %s", [snapshot.id])
            (stored,) = cursor.fetchone()
        messages = len(json.dumps(snapshot.state["messages"], separators=(",", ":")))
        report.print(f"| {size:,} | {stored:,} | {messages:,} | {take:.1f} | {restore:.1f} |")
    report.save()


if __name__ == "__main__":
    main()
