"""How long the per-turn evaluation of a session's context takes, at 100, 10,000 and 100,000 messages.

After every stored message the turn re-evaluates the budget
(``compression_maybe_schedule``: the budget from stored counts, the snapshot
threshold, the trigger), and after every reply the page and the socket show the
context panel (``context_panel``: the meter, the context line, whether the
counts are exact, the reliability). Both must cost the same whatever the
length of the history (the active context and the checkpoints in it are what
they read) and stay under 5 ms.

The sessions are 8K (Tier 2: checkpoints age and merge into the ultra one),
grown through real compressions (bench/history.py).

    .venv/bin/python bench/budget_check.py [--sizes 100 10000 100000] [--rounds 200]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django, use_model_server

os.environ["OLLM_LLM_BACKEND"] = "embedded"
setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from history import session_with_history  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

from chat.gateway import get_gateway  # noqa: E402
from chat.models import Session  # noqa: E402
from chat.selectors.context import session_budget  # noqa: E402
from chat.services.compression import compression_maybe_schedule  # noqa: E402
from chat.web.panels import context_panel  # noqa: E402
from engine.llm.embedded import MODEL_NAME  # noqa: E402

LIMIT_MS = 5.0
# "Flat": the largest history may cost at most this much more than the smallest (p50).
FLAT_FACTOR = 1.5


@dataclass(frozen=True)
class Timing:
    p50: float
    p95: float
    cpu_p50: float  # this thread's CPU time: what the code costs, whatever else the machine runs
    queries: int


def timed(call: Callable[[], object], rounds: int) -> Timing:
    """Wall p50 and p95 and CPU p50 in ms over ``rounds`` calls, and the queries one call makes."""
    call()  # warm
    with CaptureQueriesContext(connection) as queries:
        call()
    wall, cpu = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.thread_time()
        call()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
    wall.sort()
    return Timing(statistics.median(wall), wall[int(len(wall) * 0.95) - 1], statistics.median(cpu), len(queries))


def measure(args: argparse.Namespace) -> int:
    report = Report("budget_check")
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user(username="bench")
    gateway = get_gateway()
    counter = gateway.token_counter(MODEL_NAME)

    rows = []
    for size in args.sizes:
        grown = session_with_history(
            owner=owner, model=MODEL_NAME, gateway=gateway, counter=counter, messages=size, context_size=8192
        )
        print(f"session: {grown.describe()}", flush=True)
        session_id = grown.session.pk
        budget = session_budget(session=Session.objects.get(pk=session_id))
        assert not budget.compression_due, "the benchmark's session must be below its trigger"
        checks = {
            "budget check (per message)": lambda: compression_maybe_schedule(
                session=Session.objects.get(pk=session_id)  # noqa: B023
            ),
            "context panel (per reply)": lambda: context_panel(Session.objects.get(pk=session_id)),  # noqa: B023
        }
        rows.append((size, budget.active_tokens, {name: timed(call, args.rounds) for name, call in checks.items()}))

    names = list(rows[0][2])
    report.print(f"\n== per-turn context evaluation, 8K sessions, {args.rounds} rounds each, ms")
    report.print("| messages | active tokens | what | p50 | p95 | CPU p50 | queries |")
    report.print("|---:|---:|---|---:|---:|---:|---:|")
    for size, active, figures in rows:
        for name, t in figures.items():
            report.print(
                f"| {size:,} | {active:,} | {name} | {t.p50:.2f} | {t.p95:.2f} | {t.cpu_p50:.2f} | {t.queries} |"
            )
    ok = True
    for name in names:
        p50s = [figures[name].p50 for _, _, figures in rows]
        flat = max(p50s) / min(p50s)
        ok = ok and flat <= FLAT_FACTOR and max(p50s) < LIMIT_MS
        report.print(
            f"{name}: largest/smallest p50 {flat:.2f} (flat if <= {FLAT_FACTOR}); "
            f"worst p50 {max(p50s):.2f} ms (required < {LIMIT_MS} ms)"
        )
    report.save()
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    # The app's model server, as in use: the counts stored with the messages are its exact ones.
    with BenchModelServer() as server:
        use_model_server(server.url)
        return measure(args)


if __name__ == "__main__":
    sys.exit(main())
