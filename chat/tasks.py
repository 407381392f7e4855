"""Celery entry points, thin and taking ids, and the one function that decides how background work runs
(``task_dispatch``): the services ask for it by publishing a request (``chat.services.events``), and never
know whether a Celery worker or a thread of this process runs it."""

from __future__ import annotations

import logging
import threading
from typing import Any
from uuid import UUID

from celery import shared_task
from django.conf import settings
from django.db import connections

from chat.services.compression import compression_attempt
from chat.services.events import CompressionRequested, CompressionRetryDropped, TitleRequested, subscribe
from chat.services.lease import lease_expires_in
from chat.services.titles import session_title_write

logger = logging.getLogger(__name__)

COMPRESS_TASK = "chat.tasks.compress_session"
TITLE_TASK = "chat.tasks.title_session"


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


BackgroundWork = CompressionRequested | TitleRequested


def task_dispatch(request: BackgroundWork) -> None:
    """Run ``request`` in the background: with a broker, as a Celery task (a compression's retry with its
    ``delay`` as countdown); without one (``CELERY_TASK_ALWAYS_EAGER``, the embedded default), in a daemon
    thread of this process, so the caller does not wait.

    Precondition: called once what the work reads is committed (the services publish on commit)."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        _in_process(request)
        return
    if isinstance(request, TitleRequested):
        title_session.apply_async(args=[str(request.session_id)])
    elif request.token is None:
        compress_session.apply_async(args=[str(request.session_id), request.reason, request.force])
    else:
        compress_session.apply_async(
            args=[str(request.session_id), request.reason, request.force],
            kwargs={"attempt": request.attempt, "token": request.token},
            countdown=request.delay,
        )


# The compression retries this process waits to run (without a broker): a dropped one stops waiting.
_retry_timers: dict[UUID, threading.Timer] = {}
_retry_timers_lock = threading.Lock()


def _in_process(request: BackgroundWork) -> None:
    match request:
        case CompressionRequested():
            retry = request.token is not None
            timer = threading.Timer(request.delay, _compress_in_thread, args=(request,))
            timer.daemon = True
            timer.name = f"compress-retry-{request.session_id}" if retry else f"compress-{request.session_id}"
            if retry:
                with _retry_timers_lock:
                    _retry_timers[request.session_id] = timer
            timer.start()
        case TitleRequested():
            name = f"title-{request.session_id}"
            threading.Thread(target=_title_in_thread, args=(request.session_id,), name=name, daemon=True).start()


def _compress_in_thread(request: CompressionRequested) -> None:
    try:
        compression_attempt(
            session_id=request.session_id,
            reason=request.reason,
            force=request.force,
            attempt=request.attempt,
            token=request.token,
        )
    finally:
        # This thread's database connection would otherwise stay open for good.
        connections.close_all()


def _title_in_thread(session_id: UUID) -> None:
    try:
        session_title_write(session_id=session_id)
    except Exception:  # a thread's error would go nowhere: the session keeps its title
        logger.exception("the title of session %s could not be written", session_id)
    finally:
        connections.close_all()  # this thread's database connection would otherwise stay open for good


def _retry_dropped(event: CompressionRetryDropped) -> None:
    """The session's retry no longer waits to run: its timer here, if one waits, is cancelled."""
    with _retry_timers_lock:
        timer = _retry_timers.pop(event.session_id, None)
    if timer is not None:
        timer.cancel()


def connect() -> None:
    """Called once, when the chat app is ready."""
    subscribe(CompressionRequested, task_dispatch)
    subscribe(TitleRequested, task_dispatch)
    subscribe(CompressionRetryDropped, _retry_dropped)
