"""Search latency on 100,000 messages, on SQLite (FTS5) and, when one answers, PostgreSQL (tsvector + GIN).

Fills a fresh database with one user's 100 sessions of 1,000 messages each
(Zipf-distributed words, code paths, a few planted phrases), written through
the ORM so the triggers build the index as they would in use, then times
``search.selectors.search_history`` (the newest 1,000 matches ranked and
counted, one page of 20, snippets, links) for a mix of queries from very common
words to phrases, paths, prefixes and filters. Prints p50/p95 per engine and
per query; on PostgreSQL also which index the selector's ranking query uses
for a rare and a common word (its own SQL, explained).

    .venv/bin/python bench/search_latency.py [--messages 100000] [--rounds 15] [--engine sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from report import Report  # noqa: E402

PG_URL = os.environ.get("PG_TEST_URL", "postgres://postgres@127.0.0.1:5432/test")
PG_BENCH_DB = "ollm_search_bench"
SESSIONS = 100
QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("the", {}),
    ("token", {}),
    ("refresh token", {}),
    ('"rotate the refresh token"', {}),
    ("auth", {}),
    ("src/auth/login.ts", {}),
    ("login.ts", {}),
    ("deploy OR rollback", {}),
    ("migration -postgres", {}),
    ("zorblax", {}),
    ("token", {"role": "user"}),
    ("cache", {"model": "llama3.2:1b"}),
    ("decision", {"kind": "decision", "locked_only": True}),
]


def words() -> tuple[list[str], list[float]]:
    rng = random.Random(7)
    common = " ".join(
        [
            "the a to of and in is it that for on with as this be are was you we can not use will",
            "token refresh login auth session cache deploy rollback migration postgres redis query index",
            "test build error fix change file function class module request response user model context",
        ]
    ).split()
    syllables = ["ka", "lo", "mi", "ren", "tos", "vu", "zel", "qua", "dri", "po", "sen", "tar", "ul", "ni"]
    rare = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(6000)]
    vocabulary = common + rare
    weights = [1 / (rank + 1) ** 1.05 for rank in range(len(vocabulary))]
    return vocabulary, weights


def message_text(rng: random.Random, vocabulary: list[str], weights: list[float]) -> str:
    text = rng.choices(vocabulary, weights, k=rng.randint(15, 90))
    if rng.random() < 0.05:
        text.insert(
            rng.randrange(len(text)), f"src/{rng.choice(['auth', 'api', 'ui', 'db'])}/{rng.choice(vocabulary)}.ts"
        )
    if rng.random() < 0.01:
        text.insert(rng.randrange(len(text)), "src/auth/login.ts")
    if rng.random() < 0.002:
        text.append("we rotate the refresh token on every login")
    return " ".join(text)


def fill(total: int) -> Any:
    from django.contrib.auth import get_user_model

    from chat.models import Decision, Message, Session

    rng = random.Random(42)
    vocabulary, weights = words()
    owner = get_user_model().objects.create_user(username="bench", password="x")
    other = get_user_model().objects.create_user(username="other", password="x")
    per_session = total // SESSIONS
    started = time.perf_counter()
    for index in range(SESSIONS):
        session = Session.objects.create(
            owner=owner if index % 10 else other,
            title=f"Session {index}",
            model=["llama3.2:1b", "llama3.2:3b", "qwen2.5:7b"][index % 3],
            context_size=8192,
            max_tokens=8192,
        )
        Message.objects.bulk_create(
            [
                Message(
                    session=session,
                    position=position,
                    role="user" if position % 2 else "assistant",
                    content=message_text(rng, vocabulary, weights),
                    tokens=50,
                )
                for position in range(1, per_session + 1)
            ],
            batch_size=1000,
        )
        Decision.objects.create(session=session, description=f"decision {index}: use postgres", locked=index % 2 == 0)
    print(f"  filled {total:,} messages in {time.perf_counter() - started:.0f} s (triggers included)", flush=True)
    return owner


def label_of(query: str, filters: dict[str, Any]) -> str:
    return query + (f" {filters}" if filters else "")


def measure(engine: str, total: int, rounds: int) -> dict[str, Any]:
    """Time every query; returns, per query label, the matches the page shows and p50 / p95 in ms."""
    from django.db import connection

    from search.models import SearchDocument
    from search.selectors import SearchFilters, search_history

    owner = fill(total)
    print(f"  {SearchDocument.objects.count():,} indexed documents", flush=True)
    if engine == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    timings: dict[str, list[float]] = {}
    matches: dict[str, str] = {}
    for _ in range(rounds):
        for query, filters in QUERIES:
            label = label_of(query, filters)
            started = time.perf_counter()
            page = search_history(user=owner, query=query, filters=SearchFilters(**filters))
            timings.setdefault(label, []).append((time.perf_counter() - started) * 1000)
            matches[label] = f"{page.total:,}" + ("+" if page.total_is_capped else "")
    every = sorted(t for values in timings.values() for t in values[1:])  # the first round warms the caches

    def pct(values: list[float], p: float) -> float:
        return values[min(int(len(values) * p), len(values) - 1)]

    print(f"\n{engine}: {len(every)} searches, p50 {pct(every, 0.5):.1f} ms, p95 {pct(every, 0.95):.1f} ms")
    print(f"{'query':48} {'matches':>8} {'p50 ms':>8} {'p95 ms':>8}")
    figures: dict[str, Any] = {"all": [pct(every, 0.5), pct(every, 0.95)], "queries": {}, "plans": []}
    for label, values in timings.items():
        ordered = sorted(values[1:])
        figures["queries"][label] = [matches[label], statistics.median(ordered), pct(ordered, 0.95)]
        print(f"{label[:48]:48} {matches[label]:>8} {statistics.median(ordered):>8.1f} {pct(ordered, 0.95):>8.1f}")
    if engine == "postgresql":
        for query in ("zorblax", "the"):
            plan = f"the ranking query for {query!r} uses: {', '.join(ranking_indexes(owner, query)) or 'no index'}"
            figures["plans"].append(plan)
            print(f"  {plan}")
    return figures


def ranking_indexes(owner: Any, query: str) -> list[str]:
    """The indexes in the plan of the first query ``search_history`` runs (the ranking one), as it ran it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from search.selectors import search_history

    with CaptureQueriesContext(connection) as captured:
        search_history(user=owner, query=query)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + captured.captured_queries[0]["sql"])
        plan = " ".join(row[0] for row in cursor.fetchall())
    names = {"search_document_fts": "the GIN index", "search_searchdocument_pkey": "the primary key"}
    return [label for name, label in names.items() if f" on {name}" in plan or f"using {name}" in plan]


def child(engine: str, total: int, rounds: int, results: Path | None) -> None:
    if engine == "postgresql":
        parts = urlsplit(PG_URL)
        os.environ.update(
            {
                "DJANGO_SETTINGS_MODULE": "ollm_site.settings",
                "SECRET_KEY": "bench-only",
                "DATABASE_URL": urlunsplit(parts._replace(path="/" + PG_BENCH_DB)),
                "OLLM_ENV_FILE": "/nonexistent",
                "LOG_LEVEL": "WARNING",
            }
        )
        import django

        django.setup()
    else:
        from django_setup import setup_django

        setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures = measure(engine, total, rounds)
    if results:
        results.write_text(json.dumps(figures))


def table(report: Report, figures: dict[str, dict[str, Any]], rounds: int) -> None:
    """One row per query, a column per engine that ran: p50 / p95 in ms."""
    engines = list(figures)
    names = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
    report.print(
        f"\n== search latency, {rounds - 1} timed rounds of {len(QUERIES)} queries (the first round warms the caches)"
    )
    report.print("| query | matches | " + " | ".join(f"{names[e]} p50 / p95 ms" for e in engines) + " |")
    report.print("|---|---:|" + "---|" * len(engines))
    for query, filters in QUERIES:
        label = label_of(query, filters)
        shown = f"`{query}`" + "".join(f", {key} {value}" for key, value in filters.items())
        counts = sorted({figures[e]["queries"][label][0] for e in engines})
        cells = " | ".join("{1:.1f} / {2:.1f}".format(*figures[e]["queries"][label]) for e in engines)
        report.print(f"| {shown} | {' / '.join(counts)} | {cells} |")
    every = " | ".join("{:.1f} / {:.1f}".format(*figures[e]["all"]) for e in engines)
    report.print(f"| all {len(QUERIES)} queries | | {every} |")
    for engine in engines:
        for plan in figures[engine]["plans"]:
            report.print(f"{names[engine]}: {plan}")


def pg_admin(statement: str) -> None:
    import psycopg

    parts = urlsplit(PG_URL)
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(statement)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.engine, args.messages, args.rounds, args.results)
        return 0
    report = Report("search_latency")
    engines = ["sqlite", "postgresql"] if args.engine == "both" else [args.engine]
    figures: dict[str, dict[str, Any]] = {}
    for engine in engines:
        if engine == "postgresql":
            up = subprocess.run([sys.executable, str(ROOT / "scripts" / "service_up.py"), PG_URL], check=False)
            if up.returncode != 0:
                report.print(f"\npostgresql: not reachable at {PG_URL}; skipped")
                continue
            pg_admin(f"DROP DATABASE IF EXISTS {PG_BENCH_DB}")
            pg_admin(f"CREATE DATABASE {PG_BENCH_DB}")
        print(f"== {engine}: {args.messages:,} messages", flush=True)
        with tempfile.TemporaryDirectory() as folder:
            results = Path(folder) / "results.json"
            try:
                command = [sys.executable, __file__, "--child", "--engine", engine, "--results", str(results)]
                command += ["--messages", str(args.messages), "--rounds", str(args.rounds)]
                subprocess.run(command, check=True)
            finally:
                if engine == "postgresql":
                    pg_admin(f"DROP DATABASE IF EXISTS {PG_BENCH_DB}")
            figures[engine] = json.loads(results.read_text())
    if figures:
        report.print(f"{args.messages:,} messages in {SESSIONS} sessions")
        table(report, figures, args.rounds)
        report.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
