"""The retries of a background compression the model failed: how long each waits
(``OLLM_COMPRESSION_RETRY_SECONDS``), which failures are worth one, and the one retry per
session that waits to run.

A pending retry is a token in the cache (any process may supersede it); what waits to run it (a
Celery task's countdown, or without a broker a timer of this process: ``chat.tasks``) checks it.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.cache import cache

from chat.services.events import CompressionRetryDropped, publish
from engine.core.backoff import Backoff
from engine.llm import LLMError
from engine.llm.types import ContextOverflow, ModelNotFound

# A pending retry is forgotten this long after it was due: its task or thread is lost by then.
RETRY_GRACE_SECONDS = 300


def compression_backoff() -> Backoff:
    """The waits before each retry of a compression the model failed (``OLLM_COMPRESSION_RETRY_SECONDS``)."""
    return Backoff.parse(settings.OLLM_COMPRESSION_RETRY_SECONDS)


def _model_failure(exc: Exception) -> bool:
    """Whether ``exc`` is the model's trouble (timed out, unreachable, refused, broke off), which may
    pass; not a model that is missing or a prompt too long for it, which asking again cannot mend,
    nor a bug."""
    return isinstance(exc, LLMError) and not isinstance(exc, ModelNotFound | ContextOverflow)


def compression_retry_plan(*, exc: Exception, attempt: int | None, worth_it: bool) -> dict[str, Any]:
    """What a ``compression-error`` event of attempt ``attempt`` adds about the next attempt:
    ``retry_in`` (seconds), or ``gave_up`` after the last; nothing when no attempt follows a
    failure of this kind, or when ``worth_it`` is false (a forced run the budget did not call for)."""
    backoff = compression_backoff()
    if attempt is None or not backoff.delays or not worth_it or not _model_failure(exc):
        return {}
    plan: dict[str, Any] = {"attempt": attempt, "attempts": backoff.attempts}
    wait = backoff.after(attempt)
    return {**plan, "retry_in": wait} if wait is not None else {**plan, "gave_up": True}


def _retry_key(session_id: UUID) -> str:
    return f"compression-retry:{session_id}"


def compression_retry_pending(*, session_id: UUID) -> bool:
    """Whether a retry of a compression the model failed waits to run for the session."""
    return cache.get(_retry_key(session_id)) is not None


def compression_retry_superseded(*, session_id: UUID, token: str) -> bool:
    """Whether the retry ``token`` is no longer the session's pending one."""
    pending: str | None = cache.get(_retry_key(session_id))
    return pending != token


def compression_retry_forget(*, session_id: UUID) -> None:
    """No retry waits for the session any more: its token is dropped, and whatever waits to run it is
    told (``CompressionRetryDropped``: the timer of this process, without a broker, is cancelled)."""
    cache.delete(_retry_key(session_id))
    publish(CompressionRetryDropped(session_id=session_id))


def compression_retry_pend(*, session_id: UUID, delay: float) -> str:
    """The token of a new retry due in ``delay`` seconds, which supersedes any pending one."""
    token = uuid.uuid4().hex
    compression_retry_forget(session_id=session_id)
    cache.set(_retry_key(session_id), token, timeout=delay + RETRY_GRACE_SECONDS)
    return token
