"""Celery entry points: thin, taking ids."""

from __future__ import annotations

from uuid import UUID

from celery import shared_task

from contextmgr.services.compression import compression_run


@shared_task(acks_late=True)  # type: ignore[untyped-decorator]
def compress_session(session_id: str, reason: str, force: bool = False) -> str:
    return compression_run(session_id=UUID(session_id), reason=reason, force=force).status
