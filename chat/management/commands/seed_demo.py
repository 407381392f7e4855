"""A demo session for review: messages, four compressions (checkpoints at levels
3, 2, 1 and ultra, each with its revisions), a goal with locked decisions,
artifacts, snapshots and events.

No LLM is involved: summaries are made with the deterministic ``truncate``
strategy, through the same services a real compression uses.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from chat.models import Checkpoint, Message, Session, Snapshot
from chat.selectors.context import active_checkpoints, active_messages, session_budget
from chat.selectors.sessions import ModelFacts
from chat.services.checkpoints import AgedSummary, CheckpointDraft, MergedSummary, compression_commit
from chat.services.goals import goal_apply_markers
from chat.services.messages import message_create
from chat.services.sessions import session_start
from chat.services.snapshots import snapshot_create
from engine.core.aging import CheckpointInfo, Level, plan_aging
from engine.core.config import context_config_from_mapping, effective_preserve_recent
from engine.core.markers import marker_facts
from engine.core.selection import ContextMessage, select_for_compression
from engine.core.truncate import shorten_extractive
from engine.resources import count_text_tokens

SYSTEM_PROMPT = "You are a careful senior engineer. Answer briefly and record progress with goal markers."

TOPICS = [
    (
        "How should users log in?",
        "We will use JWT for authentication.\n[GOAL] Implement user authentication system\n"
        "[CHECKPOINT] Design authentication flow - COMPLETED\n[DECISION] Use JWT for authentication - LOCKED",
    ),
    (
        "Where do the tokens live in the browser?",
        "Tokens go in httpOnly cookies so scripts cannot read them.\n"
        "[DECISION] Store tokens in httpOnly cookies - LOCKED",
    ),
    (
        "Write the login endpoint.",
        "The endpoint validates the password and issues a token.\n"
        "[ARTIFACT] Created src/auth/login.ts\n[CHECKPOINT] Implement login endpoint - COMPLETED",
    ),
    (
        "Now the JWT helper.",
        "The helper signs with HS256 and a 15 minute expiry.\n[ARTIFACT] Created src/auth/jwt.ts\n"
        "[CHECKPOINT] Add JWT token generation - IN PROGRESS",
    ),
    (
        "Wire it into the API routes.",
        "The router mounts /auth/login and /auth/refresh.\n[ARTIFACT] Modified src/routes/api.ts\n"
        "[NEXT] Complete JWT token generation, then move to user registration",
    ),
    ("What about refresh tokens?", "Refresh tokens rotate on every use and are revoked on logout."),
    ("How do we test this?", "Unit tests cover signing and expiry; an integration test logs in end to end."),
    ("Any security concerns left?", "Rate limiting on login and a CSRF token on the refresh endpoint."),
]
FILLER = (
    " We compared the alternatives, measured the latency of each step, and kept notes of what failed on the way."
    " The reasoning is spelled out so that a later reader can follow it without the code at hand."
)
ROUNDS = 4


class Command(BaseCommand):
    help = "Create a demo session with compressions, aged checkpoints, a goal, decisions, snapshots and events."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="Owner of the demo session (default: the first superuser).")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model().objects
        if options["user"]:
            owner = users.filter(username=options["user"]).first()
            if owner is None:
                raise CommandError(f"There is no user {options['user']!r}.")
        else:
            owner = users.filter(is_superuser=True).order_by("id").first()
            if owner is None:
                raise CommandError(
                    "Create an admin first: the site's first account (open it in a browser), or make admin"
                )
        session = seed_demo_session(owner=owner)
        budget = session_budget(session=session)
        self.stdout.write(
            f"Created demo session {session.id} for {owner}: {session.messages.count()} messages, "
            f"{session.compression_count} compressions, {active_checkpoints(session=session).count()} active "
            f"checkpoints, {budget.used:,}/{budget.max_tokens:,} tokens in context."
        )


def _count(text: str) -> int:
    return count_text_tokens(text)


def _compress(session: Session) -> Checkpoint:
    """One compression with the truncate strategy, planned by the core like a real one."""
    config = context_config_from_mapping(session.settings).compression
    budget = session_budget(session=session)
    selection = select_for_compression(
        [
            ContextMessage(id=m.id, role=m.role, tokens=m.tokens, group=m.tool_call_id or None)  # type: ignore[arg-type]
            for m in active_messages(session=session)
        ],
        preserve_recent=effective_preserve_recent(config, budget.available) // 8,
    )
    messages = list(Message.objects.filter(pk__in=selection.message_ids).order_by("position"))
    checkpoints = list(active_checkpoints(session=session))
    plan = plan_aging(
        [CheckpointInfo(id=cp.id, level=Level(cp.level), tokens=cp.current_tokens) for cp in checkpoints],
        summary_max_tokens=config.summary_max_tokens,
        max_checkpoints=session.profile.tier.max_checkpoints,
    )
    by_id = {cp.id: cp for cp in checkpoints}
    summary_target = max(40, selection.tokens // 3)
    facts = marker_facts(m.content for m in messages)
    return compression_commit(
        session=session,
        message_ids=selection.message_ids,
        draft=CheckpointDraft(
            summary=shorten_extractive("\n".join(m.content for m in messages), summary_target, _count),
            strategy=Checkpoint.Strategy.TRUNCATE,
            key_decisions=facts.key_decisions,
            files_modified=facts.files_modified,
            next_steps=facts.next_steps,
        ),
        aged=[
            AgedSummary(
                step.checkpoint_id,
                step.to_level,
                shorten_extractive(by_id[step.checkpoint_id].summary, step.target_tokens, _count),
            )
            for step in plan.steps
        ],
        merged=MergedSummary(
            plan.merge.checkpoint_ids,
            shorten_extractive(
                "\n".join(by_id[i].summary for i in plan.merge.checkpoint_ids), plan.merge.target_tokens, _count
            ),
        )
        if plan.merge
        else None,
    )


@transaction.atomic
def seed_demo_session(*, owner: Any) -> Session:
    session = session_start(
        owner=owner,
        title="Demo: user authentication",
        model="llama3.2:3b",
        context_size=16384,
        system_prompt=SYSTEM_PROMPT,
        facts=ModelFacts(),  # a demo of stored history: no backend is asked
    )
    for round_number in range(1, ROUNDS + 1):
        for question, answer in TOPICS:
            message_create(session=session, role="user", content=f"{question} (round {round_number})")
            reply = answer + "\n" + " ".join([FILLER.strip()] * 3)
            message_create(session=session, role="assistant", content=reply)
            goal_apply_markers(session=session, text=reply)
        if round_number == ROUNDS:
            snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason="Before the last compression")
        snapshot_create(session=session, kind=Snapshot.Kind.AUTO, reason=f"Before compression {round_number}")
        _compress(session)
    session.refresh_from_db()
    return session
