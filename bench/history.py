"""Sessions with long histories for the benchmarks, grown through the app's own compressions.

A session is grown a few turns at a time: the messages are stored in bulk
(one context version per batch), and whenever the budget says a compression is
due the real ``compression_run`` runs with the ``truncate`` strategy (no
model call), so checkpoints, their aging and merges, rollovers, snapshots and
events pile up as they do in a real conversation, only faster.

Growing 100,000 messages that way would take most of an hour on two cores, so
the history before the last ``GROWN_TAIL`` messages is stored in bulk instead,
in the shape the real compressions leave (measured on 8K sessions grown as
above: a compression every ~30 messages, each leaving a checkpoint now merged
into the ultra one with its revisions, an auto-snapshot and its events).

Call ``setup_django()`` (bench/django_setup.py) before importing this module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import Max

from chat.models import Checkpoint, CheckpointRevision, ContextEvent, EventType, Message, Session, Snapshot
from chat.selectors.context import active_messages, session_budget
from chat.services.compression import compression_run
from chat.services.sessions import session_create
from engine.core.aging import Level
from engine.core.tokens import TokenCounter
from engine.llm import Gateway

# What people and the model say, in turn; a number makes every message different.
USER_LINES = (
    "How should we store the refresh token for session {n}?",
    "Please check src/auth/login.ts again, step {n}.",
    "What does the rate limit of {n} requests per minute mean for us?",
)
ASSISTANT_LINES = (
    "Keep the refresh token in an httpOnly cookie and rotate it on every use; step {n} covers the "
    "expiry of 15 min and the audit log entry.",
    "In src/auth/login.ts the form posts to /api/login; we hash with bcrypt cost 12 (note {n}) and "
    "return a JWT that lives 15 min.",
    "At {n} requests per minute a client that retries quickly is throttled; the limiter keys on the "
    "user id, and the audit log keeps each refusal.",
)


# Messages grown through real compressions at the end of every history; the rest is stored in bulk.
GROWN_TAIL = 1_000
# Messages per compression in the bulk part (what 8K sessions grown for real show).
DEEP_BLOCK = 30


@dataclass(frozen=True)
class Grown:
    session: Session
    messages: int
    compressions: int
    checkpoints: int
    events: int
    seconds: float

    def describe(self) -> str:
        return (
            f"{self.messages:,} messages, {self.compressions:,} compressions, {self.checkpoints:,} checkpoints, "
            f"{self.events:,} events (built in {self.seconds:.0f} s)"
        )


def message_text(role: str, n: int) -> str:
    lines = USER_LINES if role == Message.Role.USER else ASSISTANT_LINES
    return lines[n % len(lines)].format(n=n)


def session_with_history(
    *,
    owner: Any,
    model: str,
    gateway: Gateway,
    counter: TokenCounter,
    messages: int,
    context_size: int = 4096,
    turns_per_batch: int = 4,
    title: str = "",
    grown_tail: int | None = GROWN_TAIL,
    headroom: int = 0,
) -> Grown:
    """A new session of ``context_size`` whose history holds ``messages`` messages (user and
    assistant in turn), compressed whenever its budget said so, as the app would have.

    The last ``grown_tail`` messages (all of them when None) grow through real compressions,
    the rest is stored in bulk. With ``headroom``, a last compression runs if fewer than that
    many tokens are left before the trigger, so turns can follow without starting one."""
    started = time.perf_counter()
    session = session_create(
        owner=owner,
        model=model,
        context_size=context_size,
        title=title or f"{messages:,} messages",
        system_prompt="You are a concise security engineer.",
        settings={"compression": {"strategy": "truncate", "summary_max_tokens": 128}},
    )
    # Each template's count, once: every message of a template differs by a number only.
    sizes: dict[tuple[str, int], int] = {
        (str(role), i): counter.count(lines[i].format(n=1000)).tokens
        for role, lines in ((Message.Role.USER, USER_LINES), (Message.Role.ASSISTANT, ASSISTANT_LINES))
        for i in range(len(lines))
    }
    exact = counter.count("x").exact
    deep = 0 if grown_tail is None else max(messages - grown_tail, 0)
    added = _deep_history(session, deep, sizes, exact) if deep else 0
    while added < messages:
        batch = min(2 * turns_per_batch, messages - added)
        with transaction.atomic():
            locked = Session.objects.select_for_update().get(pk=session.pk)
            version = locked.next_context_version()
            Message.objects.bulk_create(
                Message(
                    session=locked,
                    position=added + i + 1,
                    role=role,
                    content=message_text(role, added + i),
                    tokens=sizes[(role, (added + i) % 3)],
                    tokens_exact=exact,
                    context_version=version,
                )
                for i in range(batch)
                for role in [Message.Role.USER if (added + i) % 2 == 0 else Message.Role.ASSISTANT]
            )
        added += batch
        if session_budget(session=Session.objects.get(pk=session.pk)).compression_due:
            outcome = compression_run(session_id=session.pk, reason="bench history", gateway=gateway)
            # One that would free too little is not committed, as in the app: the next batch's frees more.
            assert outcome.status in ("compressed", "rolled-over") or outcome.reason.startswith("not committed"), (
                outcome
            )
    budget = session_budget(session=Session.objects.get(pk=session.pk))
    if headroom and budget.trigger_at - budget.active_tokens < headroom:
        outcome = compression_run(session_id=session.pk, reason="bench headroom", force=True, gateway=gateway)
        assert outcome.status in ("compressed", "rolled-over"), outcome
    if connection.vendor == "sqlite":
        # A history grows over weeks, with SQLite checkpointing its WAL as it goes.
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    session.refresh_from_db()
    return Grown(
        session=session,
        messages=Message.objects.filter(session=session).count(),
        compressions=session.compression_count,
        checkpoints=Checkpoint.objects.filter(session=session).count(),
        events=ContextEvent.objects.filter(session=session).count(),
        seconds=time.perf_counter() - started,
    )


def _deep_history(session: Session, messages: int, sizes: dict[tuple[str, int], int], exact: bool) -> int:
    """``messages`` old messages, all compressed, in the shape real compressions leave: one checkpoint per
    DEEP_BLOCK messages (created, then merged into the session's ultra checkpoint, with both revisions),
    the auto-snapshot and the events of each compression. Returns the number of messages stored."""
    blocks = -(-messages // DEEP_BLOCK)
    with transaction.atomic():
        ultra = Checkpoint.objects.create(
            session=session,
            number=blocks + 1,
            level=Level.ULTRA,
            first_position=1,
            last_position=messages,
            summary="Earlier work: refresh tokens in httpOnly cookies, bcrypt cost 12, JWT for 15 min.",
            strategy=Checkpoint.Strategy.TRUNCATE,
            original_tokens=sum(sizes.values()) * messages // len(sizes),
            current_tokens=40,
            compression_count=blocks,
            retention=0.6,
        )
        CheckpointRevision.objects.create(
            checkpoint=ultra, level=Level.ULTRA, tokens=40, summary=ultra.summary, reason="merged"
        )
        old = Checkpoint.objects.bulk_create(
            Checkpoint(
                session=session,
                number=b + 1,
                level=Level.ULTRA,
                first_position=b * DEEP_BLOCK + 1,
                last_position=min((b + 1) * DEEP_BLOCK, messages),
                summary=f"Block {b}: the login form, hashing and token expiry.",
                strategy=Checkpoint.Strategy.TRUNCATE,
                original_tokens=600,
                current_tokens=30,
                compression_count=2,
                retention=0.7,
                merged_into=ultra,
            )
            for b in range(blocks)
        )
        CheckpointRevision.objects.bulk_create(
            CheckpointRevision(checkpoint=cp, level=level, tokens=tokens, summary=cp.summary, reason=reason)
            for cp in old
            for level, tokens, reason in ((Level.RECENT, 120, "created"), (Level.ULTRA, 30, "merged"))
        )
        Message.objects.bulk_create(
            (
                Message(
                    session=session,
                    position=i + 1,
                    role=role,
                    content=message_text(role, i),
                    tokens=sizes[(role, i % 3)],
                    tokens_exact=exact,
                    compressed_into=old[i // DEEP_BLOCK],
                    context_version=i // DEEP_BLOCK + 1,
                )
                for i in range(messages)
                for role in [Message.Role.USER if i % 2 == 0 else Message.Role.ASSISTANT]
            ),
            batch_size=5_000,
        )
        Snapshot.objects.bulk_create(
            Snapshot(
                session=session,
                kind=Snapshot.Kind.AUTO,
                reason=f"Before compression {b + 1}",
                state={"messages": {"last_position": b * DEEP_BLOCK, "states": []}},
                token_count=3_000,
                message_count=b * DEEP_BLOCK,
                checkpoint_count=1,
                model=session.model,
                tier=session.tier,
            )
            for b in range(blocks)
        )
        ContextEvent.objects.bulk_create(
            (
                ContextEvent(session=session, type=kind, payload=payload)
                for b in range(blocks)
                for kind, payload in (
                    (EventType.AUTO_SNAPSHOT_CREATED, {"reason": f"Before compression {b + 1}"}),
                    (EventType.CHECKPOINT_CREATED, {"checkpoint": b + 1, "tokens": 120, "retention": 0.7}),
                    (EventType.CHECKPOINT_AGED, {"checkpoint": b, "from_level": 3, "to_level": 0}),
                    (
                        EventType.COMPRESSED,
                        {"tokens_before": 3_000, "tokens_after": 1_500, "duration_ms": 80, "reliability": 0.3},
                    ),
                )
            ),
            batch_size=5_000,
        )
        version = blocks + 1
        Session.objects.filter(pk=session.pk).update(
            compression_count=blocks + 1, context_version=version, compressed_through=messages
        )
    return messages


def drop_messages_after(session: Session, position: int) -> None:
    """Forget the messages stored after ``position`` (a benchmark's turn), so the next round
    starts from the same state; only for sessions no compression ran on since."""
    Message.objects.filter(session=session, position__gt=position).delete()


def last_position(session: Session) -> int:
    return Message.objects.filter(session=session).aggregate(last=Max("position"))["last"] or 0


def active_count(session: Session) -> int:
    return active_messages(session=session).count()
