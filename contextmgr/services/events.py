from __future__ import annotations

from typing import Any

from chat.models import Session
from contextmgr.models import ContextEvent, EventType


def event_record(*, session: Session, type: EventType, payload: dict[str, Any] | None = None) -> ContextEvent:
    """Persist one of the spec's events for a session (inside the caller's transaction, if any)."""
    return ContextEvent.objects.create(session=session, type=type, payload=payload or {})
