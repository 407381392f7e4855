"""Server time of the admin's session list, as a staff reviewer sees it, over 1,000 sessions.

Fills a fresh database with 1,000 sessions of 20 users (a few messages each, a goal with a
locked decision on every fifth, a checkpoint on every third), written through the ORM, then
requests the changelist through Django's test client (middleware, login, admin, templates; no
network) as a staff account that is not a superuser: the first page, a tier filter, a
reliability filter and a search. The figure is the p50 of the rounds, required < 1,000 ms.

    .venv/bin/python bench/admin_list.py [--sessions 1000] [--rounds 11]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django

os.environ["OLLM_LLM_BACKEND"] = "embedded"
setup_django()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402
from page_load import page_timing  # noqa: E402
from report import Report  # noqa: E402

from chat.models import Checkpoint, Decision, Goal, Message, Session  # noqa: E402  # noqa: E402

LIMIT_MS = 1000.0


def fill(sessions: int) -> None:
    users = [get_user_model().objects.create_user(username=f"user{n}") for n in range(20)]
    for index in range(sessions):
        session = Session.objects.create(
            owner=users[index % len(users)],
            title=f"Session {index}: refresh tokens and the billing API",
            model=["llama3.2:1b", "llama3.2:3b", "qwen2.5:7b"][index % 3],
            context_size=[2048, 4096, 8192][index % 3],
            max_tokens=[1700, 3400, 6800][index % 3],
            reliability_score=(index % 100) / 100,
        )
        Message.objects.bulk_create(
            [
                Message(
                    session=session,
                    position=position,
                    role="user" if position % 2 else "assistant",
                    content=f"message {position} of session {index}: we keep the refresh token in Redis",
                    tokens=30,
                )
                for position in range(1, 9)
            ]
        )
        if index % 5 == 0:
            Goal.objects.create(session=session, description="Ship the login flow")
            Decision.objects.create(session=session, description="Use JWT", locked=True)
        if index % 3 == 0:
            Checkpoint.objects.create(
                session=session, number=1, level=3, first_position=2, last_position=4,
                summary="The login flow so far.", original_tokens=60, current_tokens=20,
            )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    report = Report("admin_list")
    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    fill(args.sessions)
    print(f"filled {args.sessions:,} sessions in {time.perf_counter() - started:.0f} s", flush=True)
    reviewer = get_user_model().objects.create_user(username="reviewer", is_staff=True)
    client = Client(HTTP_HOST="localhost")
    client.force_login(reviewer)
    changelist = reverse("admin:chat_session_changelist")
    pages = {
        "first page": changelist,
        "tier filter": changelist + "?tier=2",
        "reliability filter": changelist + "?reliability=CRITICAL",
        "search": changelist + "?q=billing",
    }
    report.print(f"\n== admin session list as a staff reviewer, {args.sessions:,} sessions, {args.rounds} rounds, ms")
    report.print("| page | p50 | p95 | queries | rows |")
    report.print("|---|---:|---:|---:|---:|")
    ok = True
    for name, url in pages.items():
        timing = page_timing(client, url, args.rounds)
        rows = timing.response.content.decode().count('<td class="field-context"')
        ok = ok and timing.p50 < LIMIT_MS
        report.print(f"| {name} | {timing.p50:.0f} | {timing.p95:.0f} | {timing.queries} | {rows} |")
    report.print(f"required: p50 < {LIMIT_MS:,.0f} ms")
    report.save()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
