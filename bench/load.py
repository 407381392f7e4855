"""Several people chatting at once on the default setup: turn times, the longest a compression
waited for the model, compressions per minute, and what failed.

A live server (daphne, SQLite, compressions in its own threads) and the bundled model server,
as `make run` starts them; each client a thread with a user and a session of its own, asking
for long answers over the REST API (tests/support/load.py, the driver the load test uses).
The requirement (issue 32): no failed compression, no failed turn, no context over the model's.

    .venv/bin/python bench/load.py [--clients 5] [--turns 8] [--context-size 2048]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django

setup_django()

from report import Report  # noqa: E402

from engine.llm.embedded import MODEL_NAME  # noqa: E402
from tests.support.live_server import serve  # noqa: E402
from tests.support.load import load_run, users_with_tokens  # noqa: E402
from tests.support.model_server import ModelServerProcess  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--context-size", type=int, default=2048)
    args = parser.parse_args()
    report = Report("load")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        model_server = ModelServerProcess(log=work / "modelserver.log").start()
        try:
            with serve(work, model_server, with_user=False, reply_max_tokens=None) as url:
                tokens = users_with_tokens(work, model_server, args.clients)
                run = load_run(url, tokens, turns=args.turns, model=MODEL_NAME, context_size=args.context_size)
        finally:
            model_server.stop()
    failures = [f for c in run.clients for f in c.failures]
    over = [o for c in run.clients for o in c.over_budget]
    errors = [e for c in run.clients for e in c.errors]
    minutes = run.seconds / 60
    report.print(
        f"{args.clients} clients x {args.turns} turns at {args.context_size // 1024}K, {MODEL_NAME}, long answers, "
        "REST API, compressions in the server's threads"
    )
    report.print("| turns | turn p50 | turn p95 | longest background wait | compressions | per minute "
                 "| compression errors | failed turns | over the context |")  # fmt: skip
    report.print("|---|---|---|---|---|---|---|---|---|")
    report.print(
        f"| {len(run.turn_seconds)} | {run.p50:.1f} s | {run.percentile(0.95):.1f} s "
        f"| {run.longest_background_wait:.1f} s | {run.compressions} | {run.compressions / minutes:.2f} "
        f"| {len(errors)} | {len(failures)} | {len(over)} |"
    )
    for line in [*failures, *over, *errors][:10]:
        report.print(f"- {line}")
    report.save()
    if failures or over or errors:
        print("requirement not met: something failed under load")
        sys.exit(1)


if __name__ == "__main__":
    main()
