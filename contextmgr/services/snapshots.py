from __future__ import annotations

from django.db import transaction

from chat.models import Session
from contextmgr.models import EventType, Snapshot
from contextmgr.selectors import session_budget, session_state
from contextmgr.services.events import event_record


@transaction.atomic
def snapshot_create(*, session: Session, kind: Snapshot.Kind, reason: str = "") -> Snapshot:
    """Capture the session's full state as an immutable snapshot and record the event."""
    state = session_state(session=session)
    snapshot = Snapshot.objects.create(
        session=session,
        kind=kind,
        reason=reason[:200],
        state=state,
        token_count=session_budget(session=session).used,
        message_count=len(state["messages"]),
        checkpoint_count=sum(1 for cp in state["checkpoints"] if cp["merged_into"] is None),
        model=session.model,
        tier=session.tier,
    )
    event_record(
        session=session,
        type=EventType.AUTO_SNAPSHOT_CREATED if kind == Snapshot.Kind.AUTO else EventType.SNAPSHOT_CREATED,
        payload={"snapshot": snapshot.id, "reason": snapshot.reason, "tokens": snapshot.token_count},
    )
    return snapshot
