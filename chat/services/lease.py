"""The per-session lease that lets one context-changing job run at a time.

Compressions and snapshot restores both take it, so a restore can never be
half-undone by a compression that was planned before it. It is a timestamp
on the session row, set with one conditional UPDATE, so it works the same on
SQLite and PostgreSQL and survives across processes.

A job renews its lease (``LeaseHeartbeat``) every quarter of
``OLLM_COMPRESSION_LEASE_SECONDS``; a lease not renewed for that long is taken
to have died with its worker, so a killed worker blocks its session for
seconds, not minutes, however long a live compression takes.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from types import TracebackType
from uuid import UUID

from django.conf import settings
from django.db import connections
from django.db.models import Q
from django.utils import timezone

from chat.models import Session

logger = logging.getLogger(__name__)
# How long the job stopping waits for a renewal in flight before giving the lease back anyway.
HEARTBEAT_JOIN_SECONDS = 2.0


def lease_timeout() -> timedelta:
    return timedelta(seconds=settings.OLLM_COMPRESSION_LEASE_SECONDS)


def lease_acquire(*, session_id: UUID) -> datetime | None:
    """Take the lease; returns its token (the time it was taken), or None when another job holds it."""
    now = timezone.now()
    free = Q(compression_started_at__isnull=True) | Q(compression_started_at__lt=now - lease_timeout())
    taken = Session.objects.filter(Q(pk=session_id) & free).update(compression_started_at=now)
    return now if taken == 1 else None


def lease_take_over(*, session_id: UUID) -> datetime:
    """Take the lease whoever holds it; returns its token. The job that held it finds it lost at
    its next renewal and gives nothing back; should it still commit, it does so over the same
    messages as the new holder, so one of the two commits conflicts and changes nothing.

    For a turn that has waited long enough for a compression stuck on the model."""
    now = timezone.now()
    Session.objects.filter(pk=session_id).update(compression_started_at=now)
    return now


def lease_held_by(*, session_id: UUID, token: datetime) -> bool:
    """Whether the lease is still the one taken (or last renewed) with ``token``."""
    return Session.objects.filter(pk=session_id, compression_started_at=token).exists()


def lease_renew(*, session_id: UUID, token: datetime) -> datetime | None:
    """Renew a lease still held with ``token``; the new token, or None when the lease was lost."""
    now = timezone.now()
    renewed = Session.objects.filter(pk=session_id, compression_started_at=token).update(compression_started_at=now)
    return now if renewed == 1 else None


def lease_release(*, session_id: UUID, token: datetime) -> None:
    """Give the lease back, unless it expired and another job has taken it since."""
    Session.objects.filter(pk=session_id, compression_started_at=token).update(compression_started_at=None)


def lease_held(*, session_id: UUID) -> bool:
    return lease_expires_in(session_id=session_id) is not None


def lease_held_on(*, session: Session) -> bool:
    """Whether a job holds the lease, as ``session``, just read, says."""
    return _expires_in(session.compression_started_at) is not None


def lease_expires_in(*, session_id: UUID) -> float | None:
    """Seconds until the session's lease expires unless renewed; None when no job holds it."""
    return _expires_in(Session.objects.filter(pk=session_id).values_list("compression_started_at", flat=True).first())


def _expires_in(taken: datetime | None) -> float | None:
    if taken is None:
        return None
    left = (taken + lease_timeout() - timezone.now()).total_seconds()
    return left if left > 0 else None


class LeaseHeartbeat:
    """Renews a held lease from a thread of its own while the job runs; ``token`` is the current one."""

    def __init__(self, *, session_id: UUID, token: datetime) -> None:
        self.session_id = session_id
        self.token: datetime | None = token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"lease-{session_id}")

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(HEARTBEAT_JOIN_SECONDS)

    def _run(self) -> None:
        interval = lease_timeout().total_seconds() / 4
        try:
            while not self._stop.wait(interval):
                token = self.token
                if token is None:
                    return
                try:
                    self.token = lease_renew(session_id=self.session_id, token=token)
                except Exception:  # the database may be back by the next beat, on a new connection
                    logger.exception("could not renew the lease of session %s", self.session_id)
                    connections.close_all()
                else:
                    if self.token is None:
                        logger.warning("session %s: the lease was lost (expired and taken)", self.session_id)
        finally:
            connections.close_all()  # this thread's own connections
