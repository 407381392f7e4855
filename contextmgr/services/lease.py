"""The per-session lease that lets one context-changing job run at a time.

Compressions and snapshot restores both take it, so a restore can never be
half-undone by a compression that was planned before it. It is a timestamp
on the session row, set with one conditional UPDATE, so it works the same on
SQLite and PostgreSQL and survives across processes. A lease older than
LEASE_TIMEOUT is taken to have died with its worker.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from django.db.models import Q
from django.utils import timezone

from chat.models import Session

LEASE_TIMEOUT = timedelta(minutes=10)


def lease_acquire(*, session_id: UUID) -> datetime | None:
    """Take the lease; returns its token (the time it was taken), or None when another job holds it."""
    now = timezone.now()
    free = Q(compression_started_at__isnull=True) | Q(compression_started_at__lt=now - LEASE_TIMEOUT)
    taken = Session.objects.filter(Q(pk=session_id) & free).update(compression_started_at=now)
    return now if taken == 1 else None


def lease_release(*, session_id: UUID, token: datetime) -> None:
    """Give the lease back, unless it expired and another job has taken it since."""
    Session.objects.filter(pk=session_id, compression_started_at=token).update(compression_started_at=None)


def lease_held(*, session_id: UUID) -> bool:
    cutoff = timezone.now() - LEASE_TIMEOUT
    return Session.objects.filter(pk=session_id, compression_started_at__gte=cutoff).exists()
