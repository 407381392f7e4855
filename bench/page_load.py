"""Server time of the chat page and the aging timeline for a session of 10,000 messages.

The session is 8K (Tier 2), its history grown through real compressions
(bench/history.py), so it holds the checkpoints, revisions, snapshots and
events such a history leaves. Each page is requested through Django's test
client (middleware, login, views, templates; no network), logged in as its
owner; the figure is the p50 of the rounds, required < 200 ms.

    .venv/bin/python bench/page_load.py [--messages 10000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django, use_model_server

os.environ["OLLM_LLM_BACKEND"] = "embedded"
setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402
from history import session_with_history  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

from chat.gateway import get_gateway  # noqa: E402
from engine.llm.embedded import MODEL_NAME  # noqa: E402

LIMIT_MS = 200.0


class QueryCounter:
    """Counts a request's queries (its request signals reset ``connection.queries``)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        self.count += 1
        return execute(sql, params, many, context)

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class PageTiming:
    """One page's server time over some rounds, after a warm-up, with the queries of one request."""

    response: Any
    queries: int
    p50: float
    p95: float


def page_timing(client: Client, url: str, rounds: int) -> PageTiming:
    response = client.get(url)  # warm
    assert response.status_code == 200, (url, response.status_code)
    queries = QueryCounter()
    with connection.execute_wrapper(queries):
        response = client.get(url)
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        client.get(url)
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return PageTiming(response, len(queries), statistics.median(samples), samples[int(len(samples) * 0.95) - 1])


def measure(args: argparse.Namespace) -> int:
    report = Report("page_load")
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user(username="bench")
    gateway = get_gateway()
    grown = session_with_history(
        owner=owner,
        model=MODEL_NAME,
        gateway=gateway,
        counter=gateway.token_counter(MODEL_NAME),
        messages=args.messages,
        context_size=8192,
    )
    print(f"session: {grown.describe()}", flush=True)
    client = Client(HTTP_HOST="localhost")
    client.force_login(owner)
    pages = {
        "chat page": reverse("chat:chat", args=[grown.session.pk]),
        "aging timeline": reverse("context:timeline", args=[grown.session.pk]),
    }
    report.print(f"\n== server time of one page, {args.messages:,}-message session, {args.rounds} rounds, ms")
    report.print("| page | p50 | p95 | queries | HTML |")
    report.print("|---|---:|---:|---:|---:|")
    ok = True
    for name, url in pages.items():
        timing = page_timing(client, url, args.rounds)
        ok = ok and timing.p50 < LIMIT_MS
        report.print(
            f"| {name} | {timing.p50:.0f} | {timing.p95:.0f} | {timing.queries} | "
            f"{len(timing.response.content) // 1024:,} KiB |"
        )
    report.print(f"required: p50 < {LIMIT_MS:.0f} ms")
    report.save()
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    # The app's model server, as in use: the pages ask it for the backend's status and models.
    with BenchModelServer() as server:
        use_model_server(server.url)
        return measure(args)


if __name__ == "__main__":
    sys.exit(main())
