"""Whether a compression of a session runs or is still to come, the one wait for it, and why
the last one failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from uuid import UUID

from asgiref.sync import sync_to_async

from chat.models import ContextEvent, EventType, Session
from chat.selectors.context import session_budget, session_config
from chat.services.lease import lease_held
from engine.core.budget import Budget


def compression_running(*, session_id: UUID) -> bool:
    """Whether a compression (or a restore) of the session holds its lease right now."""
    return lease_held(session_id=session_id)


# The events that end a compression run, whatever came of it.
COMPRESSION_OUTCOMES = (
    EventType.COMPRESSED,
    EventType.ROLLOVER_COMPLETE,
    EventType.COMPRESSION_SKIPPED,
    EventType.COMPRESSION_ERROR,
)
WAIT_POLL_SECONDS = 0.2


async def compression_wait(
    *, session_id: UUID, timeout: float, after_event_id: int | None = None, budget: Budget | None = None
) -> bool:
    """Wait until no compression of the session is running; False if ``timeout`` passed first.
    The wait for a compression on an event loop (it holds no thread meanwhile); the synchronous
    turn, the API and the terminal chat wait with ``compression_wait_blocking``, the same looks.

    With ``after_event_id``, also wait for one that is due but may not have taken its lease
    yet: while the budget says one is due and none of its outcome events has been recorded
    since that event, it is still to come. ``budget``: the session's budget as the caller has
    just read it, for the first look.
    """
    deadline = time.monotonic() + timeout
    while True:
        if not await sync_to_async(_compression_pending)(session_id, after_event_id, budget):
            return True
        if time.monotonic() >= deadline:
            return False
        budget = None  # later looks read it again
        await asyncio.sleep(WAIT_POLL_SECONDS)


def compression_wait_blocking(
    *,
    session_id: UUID,
    timeout: float,
    after_event_id: int | None = None,
    budget: Budget | None = None,
    interrupted: Callable[[], bool] | None = None,
) -> bool:
    """``compression_wait`` in the calling thread: the same looks, a sleep between them. False
    also when ``interrupted`` says so (a stopped turn stops waiting at the next look)."""
    deadline = time.monotonic() + timeout
    while True:
        if not _compression_pending(session_id, after_event_id, budget):
            return True
        if time.monotonic() >= deadline or (interrupted is not None and interrupted()):
            return False
        budget = None  # later looks read it again
        time.sleep(WAIT_POLL_SECONDS)


def _compression_pending(session_id: UUID, after_event_id: int | None, budget: Budget | None) -> bool:
    return compression_running(session_id=session_id) or (
        after_event_id is not None and _compression_to_come(session_id, after_event_id, budget)
    )


def _compression_to_come(session_id: UUID, after_event_id: int, budget: Budget | None) -> bool:
    """Whether the budget says a compression is due and none has ended since ``after_event_id``."""
    if budget is not None and not budget.compression_due:
        return False
    session = Session.objects.get(pk=session_id)
    if not session_config(session).compression.enabled:
        return False
    if not (budget or session_budget(session=session)).compression_due:
        return False
    return not ContextEvent.objects.filter(
        session_id=session_id, id__gt=after_event_id, type__in=COMPRESSION_OUTCOMES
    ).exists()


def compression_failure_since(*, session_id: UUID, after_event_id: int) -> str | None:
    """Why the compression of the session that ended last since event ``after_event_id`` failed;
    None when it did not fail, or none has ended since."""
    last = (
        ContextEvent.objects.filter(session_id=session_id, id__gt=after_event_id, type__in=COMPRESSION_OUTCOMES)
        .order_by("-id")
        .first()
    )
    if last is None or last.type != EventType.COMPRESSION_ERROR:
        return None
    payload = last.payload if isinstance(last.payload, dict) else {}
    return str(payload.get("reason") or payload.get("error") or "no reason recorded")
