"""How long an import at the 5,000-entry cap takes, and how long it holds up another user's writes.

``session_import`` counts every message's tokens (the model server's tokenizer, over HTTP, 500
texts a request) before its transaction; the transaction then writes the session and its messages
(``message_create_many``: one lock, one numbering, batched inserts), and on SQLite holds the write
lock from its start to its end. While it runs, a second thread writes to another
session as a user would (a PATCH of its title, a message), one write after the other, and
records how long each waited: the longest of those waits is what the import costs everyone else.

    .venv/bin/python bench/import_large.py [--messages 4990] [--tool-calls 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django, use_model_server

os.environ["OLLM_LLM_BACKEND"] = "embedded"
setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

from chat.gateway import get_gateway  # noqa: E402
from chat.models import Message  # noqa: E402
from chat.services.files import imports  # noqa: E402
from chat.services.messages import message_create  # noqa: E402
from chat.services.sessions import session_create, session_update  # noqa: E402
from engine.llm.embedded import MODEL_NAME  # noqa: E402

# About 300 characters a message: 4,990 of them make a file of about 1.7 MB, under the 2 MiB limit.
LINE = "Step {n}: the orders table gets an index on (user_id, created_at); the report query reads it. "


def session_file(messages: int, tool_calls: int) -> dict[str, Any]:
    return {
        "model": MODEL_NAME,
        "metadata": {"contextSize": 8192, "title": "A large import"},
        "messages": [
            {
                "role": "user" if n % 2 == 0 else "assistant",
                "parts": [{"type": "text", "text": LINE.format(n=n) * 3}],
                "timestamp": f"2026-01-{1 + n // 1000:02d}T{(n // 60) % 24:02d}:{n % 60:02d}:00Z",
            }
            for n in range(messages)
        ],
        "toolCalls": [
            {"id": f"call_{n}", "name": "read_file", "args": {"path": f"f{n}.py"}, "result": {"llmContent": "ok"}}
            for n in range(tool_calls)
        ],
    }


class Writer(threading.Thread):
    """Another user's writes, one after the other, each timed, until stopped."""

    def __init__(self, owner: Any) -> None:
        super().__init__(daemon=True)
        self.session = session_create(owner=owner, model=MODEL_NAME, context_size=8192, title="elsewhere")
        self.waits: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                start = time.perf_counter()
                try:
                    if n % 2 == 0:
                        session_update(session=self.session, title=f"elsewhere {n}")
                    else:
                        message_create(session=self.session, role="user", content=f"a message {n}")
                except Exception as exc:  # a "database is locked" is a result here, not a crash
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                self.waits.append(time.perf_counter() - start)
                n += 1
                time.sleep(0.005)
        finally:
            connection.close()


def run(args: argparse.Namespace) -> int:
    report = Report("import_large")
    call_command("migrate", verbosity=0)
    user_model = get_user_model()
    owner = user_model.objects.create_user(username="importer", password="bench-only")
    other = user_model.objects.create_user(username="elsewhere", password="bench-only")
    data = session_file(args.messages, args.tool_calls)

    # The transaction's share: _session_import is what holds the write lock.
    in_transaction: list[float] = []
    store = imports._session_import

    def timed_store(**kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return store(**kwargs)
        finally:
            in_transaction.append(time.perf_counter() - start)

    imports._session_import = timed_store
    gateway = get_gateway()
    writer = Writer(other)
    writer.start()
    time.sleep(0.5)  # the writer's pace with nothing in its way
    idle = list(writer.waits)
    start = time.perf_counter()
    session = imports.session_file_import(owner=owner, data=data, gateway=gateway).session
    total = time.perf_counter() - start
    time.sleep(0.2)
    writer.stop.set()
    writer.join()
    during = writer.waits[len(idle) :]
    stored = Message.objects.filter(session=session).count()
    entries = args.messages + args.tool_calls

    report.print(f"\n== an import of {entries:,} entries ({stored:,} messages stored), SQLite, seconds")
    report.print("| entries | import | counted before the transaction | transaction (write lock held) |")
    report.print("|---:|---:|---:|---:|")
    report.print(f"| {entries:,} | {total:.2f} | {total - in_transaction[0]:.2f} | {in_transaction[0]:.2f} |")
    report.print("\n== another user's writes meanwhile (a PATCH of a session, a message), ms")
    report.print("| writes | idle p50 | p50 | p95 | longest wait | failed |")
    report.print("|---:|---:|---:|---:|---:|---:|")
    ms = sorted(w * 1000 for w in during)
    p95 = ms[int(0.95 * (len(ms) - 1))] if ms else 0.0
    report.print(
        f"| {len(ms):,} | {statistics.median(idle) * 1000:.1f} | {statistics.median(ms) if ms else 0:.1f} | "
        f"{p95:.1f} | {max(ms, default=0):.0f} | {len(writer.failures)} |"
    )
    for failure in sorted(set(writer.failures))[:3]:
        report.print(f"\nA write failed: {failure}")
    report.save()
    return 0 if stored == entries and not writer.failures else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4_990)
    parser.add_argument("--tool-calls", type=int, default=10)
    args = parser.parse_args()
    with BenchModelServer() as server:
        use_model_server(server.url)
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
