"""Celery entry points: thin, taking ids."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from celery import shared_task

from chat.services.compression import COMPRESS_TASK, compression_attempt
from chat.services.lease import lease_expires_in
from chat.services.titles import TITLE_TASK, session_title_write


@shared_task(name=COMPRESS_TASK, bind=True, acks_late=True)  # type: ignore[untyped-decorator]
def compress_session(
    self: Any, session_id: str, reason: str, force: bool = False, attempt: int = 1, token: str | None = None
) -> str:
    """``attempt``, ``token``: a retry of a compression the model failed (``compression_attempt``)."""
    if (self.request.delivery_info or {}).get("redelivered"):
        # Handed back because the worker running it died (acks_late, reject_on_worker_lost): the
        # lease that worker held stops being renewed and frees itself; run once it has.
        wait = lease_expires_in(session_id=UUID(session_id))
        if wait is not None:
            raise self.retry(countdown=wait + 1)
    return compression_attempt(
        session_id=UUID(session_id), reason=reason, force=force, attempt=attempt, token=token
    ).status


@shared_task(name=TITLE_TASK)  # type: ignore[untyped-decorator]
def title_session(session_id: str) -> str | None:
    """A session's title, once it has its first reply (``session_title_write``)."""
    return session_title_write(session_id=UUID(session_id))
