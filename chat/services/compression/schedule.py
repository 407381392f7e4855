"""Compression in the background: scheduled after a message or on request, retried by itself
when the model fails it. The package's other parts are ``run`` (the run), ``summaries`` (what the
model is asked for), ``retry`` (the backoff) and ``wait`` (the one wait for a run); its door is
``chat.services.compression``.
"""

from __future__ import annotations

from uuid import UUID

from django.core.cache import cache
from django.db import transaction

from chat.models import Session
from chat.selectors.context import session_budget, session_config
from chat.services.compression.retry import (
    compression_retry_forget,
    compression_retry_pend,
    compression_retry_pending,
    compression_retry_superseded,
)
from chat.services.compression.run import CompressionOutcome, compression_run
from chat.services.compression.wait import compression_running
from chat.services.events import CompressionRequested, publish
from chat.services.snapshots import snapshot_auto_create
from engine.core.budget import Budget

# A compression asked for is forgotten this long after, if it never ran: its task or thread is lost by then.
QUEUED_SECONDS = 300


def _queued_key(session_id: UUID) -> str:
    return f"compression-queued:{session_id}"


def compression_queued(*, session_id: UUID) -> bool:
    """Whether a compression of the session was asked for and has not ended yet (queued or running)."""
    return cache.get(_queued_key(session_id)) is not None


def compression_schedule(*, session_id: UUID, reason: str, force: bool = False) -> None:
    """Run a compression in the background once the current transaction commits
    (``force``: even when the budget does not call for one, as "Compress now" asks); one the
    model fails is tried again by itself (``compression_attempt``).

    It is asked for (``CompressionRequested``) and ``chat.tasks.task_dispatch`` runs it: a Celery
    worker with a broker, a thread of this process without one (the embedded default), so the
    turn does not wait. One the budget called for is asked once: while another of the session is
    queued or running (``compression_queued``, in the cache, so across processes), it is not asked
    again, since it would only be skipped; a forced one is always asked.
    """

    def enqueue() -> None:
        if not cache.add(_queued_key(session_id), reason, timeout=QUEUED_SECONDS) and not force:
            return
        publish(CompressionRequested(session_id=session_id, reason=reason, force=force))

    transaction.on_commit(enqueue)


def compression_attempt(
    *, session_id: UUID, reason: str, force: bool = False, attempt: int = 1, token: str | None = None
) -> CompressionOutcome:
    """One attempt of a background compression: ``compression_run``, then, when the model failed
    it and the backoff (``retry.compression_backoff``) has a wait left, the next attempt, scheduled to run
    after that wait, never forced (it runs only if the budget still calls for it).

    One retry at most waits per session (the cache holds its ``token``): a retry whose token is no
    longer the pending one was superseded (by a newer attempt, or a compression that succeeded)
    and does nothing.
    """
    if token is not None and compression_retry_superseded(session_id=session_id, token=token):
        return CompressionOutcome("skipped", "superseded: a newer attempt or a compression that succeeded")
    compression_retry_forget(session_id=session_id)
    try:
        outcome = compression_run(session_id=session_id, reason=reason, force=force, attempt=attempt)
    finally:
        cache.delete(_queued_key(session_id))
    if outcome.retry_in is not None:
        _retry_schedule(session_id, reason=reason, attempt=attempt + 1, delay=outcome.retry_in)
    return outcome


def _retry_schedule(session_id: UUID, *, reason: str, attempt: int, delay: float) -> None:
    """Attempt number ``attempt`` in ``delay`` seconds (``chat.tasks.task_dispatch``: a Celery task with
    that countdown, or a timer thread of this process without a broker)."""
    token = compression_retry_pend(session_id=session_id, delay=delay)
    publish(
        CompressionRequested(
            session_id=session_id, reason=reason, force=False, attempt=attempt, token=token, delay=delay
        )
    )


def compression_maybe_schedule(*, session: Session, budget: Budget | None = None) -> bool:
    """After a message is stored: take the automatic snapshot when usage reaches its threshold,
    and schedule a compression when the budget says it is due.

    ``session``: as read by the caller's request or turn (its settings decide); ``budget``: the
    session's budget, when the caller has just read it (it is read here otherwise).
    """
    config = session_config(session)
    if budget is None:
        budget = session_budget(session=session)
    usage = budget.usage_of_available
    snapshot_auto_create(
        session=session, config=config, reason=f"At {round(usage * 100)}% of the available budget", usage=usage
    )
    if not config.compression.enabled:
        return False
    if not budget.compression_due:
        return False
    if compression_running(session_id=session.pk) or compression_queued(session_id=session.pk):
        # The running or queued one is what the budget asks for; a second would only be skipped.
        return False
    if compression_retry_pending(session_id=session.pk):
        # The model failed the last one: its retry waits out the backoff, rather than each new
        # message asking the model again at once.
        return False
    compression_schedule(session_id=session.pk, reason=f"{budget.active_tokens:,} of {budget.trigger_at:,} tokens")
    return True
