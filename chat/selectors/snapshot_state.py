"""What a snapshot holds: the session's state, enough to rebuild its active context exactly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Max

from chat.models import Checkpoint, Goal, Message, Session, Snapshot


def message_states(*, session: Session) -> dict[str, Any]:
    """Every message's context state, so a snapshot restores without any other snapshot.

    ``states`` lists ``[id, compressed_into, excluded_from_context]`` for each
    message in position order; ``last_position`` is the newest message's.
    bench/snapshot_size.py measures what it costs: about 17 bytes a message (170 KB at 10,000).
    """
    rows = (
        Message.objects.filter(session=session)
        .order_by("position")
        .values_list("id", "compressed_into_id", "excluded_from_context")
    )
    states = [list(row) for row in rows]
    last = Message.objects.filter(session=session).aggregate(last=Max("position"))["last"] or 0
    return {"last_position": last, "states": states}


def snapshot_message_states(*, snapshot: Snapshot) -> dict[int, tuple[int | None, bool]]:
    """Every message's ``(compressed_into, excluded_from_context)`` as of ``snapshot``, from it alone."""
    return {
        message_id: (compressed_into, excluded)
        for message_id, compressed_into, excluded in snapshot.state["messages"]["states"]
    }


def session_state(*, session: Session) -> dict[str, Any]:
    """Everything needed to rebuild the session's active context exactly, as JSON-ready data."""
    return {
        "session": {
            "id": str(session.id),
            "title": session.title,
            "model": session.model,
            "context_size": session.context_size,
            "max_tokens": session.max_tokens,
            "system_prompt": session.system_prompt,
            "system_prompt_tokens": session.system_prompt_tokens,
            "settings": session.settings,
            "compression_count": session.compression_count,
        },
        "messages": message_states(session=session),
        "checkpoints": [
            {
                "id": cp.id,
                "number": cp.number,
                "level": cp.level,
                "first_position": cp.first_position,
                "last_position": cp.last_position,
                "origin": cp.origin,
                "summary": cp.summary,
                "strategy": cp.strategy,
                "original_tokens": cp.original_tokens,
                "current_tokens": cp.current_tokens,
                "compression_count": cp.compression_count,
                "key_decisions": cp.key_decisions,
                "files_modified": cp.files_modified,
                "next_steps": cp.next_steps,
                "facts": cp.facts,
                "ledger": cp.ledger,
                "retention": cp.retention,
                "merged_into": cp.merged_into_id,
                "retired": cp.retired,
            }
            for cp in Checkpoint.objects.filter(session=session).order_by("number")
        ],
        "goals": [
            {
                "id": goal.id,
                "description": goal.description,
                "priority": goal.priority,
                "status": goal.status,
                "next_step": goal.next_step,
                "created_at": goal.created_at.isoformat(),
                "completed_at": goal.completed_at.isoformat() if goal.completed_at else None,
                "checkpoints": [{"description": c.description, "status": c.status} for c in goal.checkpoints.all()],
            }
            for goal in Goal.objects.filter(session=session).prefetch_related("checkpoints")
        ],
        "decisions": [
            {"id": d.id, "goal": d.goal_id, "description": d.description, "locked": d.locked}
            for d in session.decisions.all()
        ],
        "artifacts": [
            {"id": a.id, "goal": a.goal_id, "path": a.path, "action": a.action} for a in session.artifacts.all()
        ],
    }


@dataclass(frozen=True)
class BranchSource:
    """The state a branch at ``through`` starts from: ``state`` as ``session_state`` writes it;
    ``snapshot`` the one it was read from (None: the session as it is now)."""

    state: dict[str, Any]
    snapshot: Snapshot | None


def branch_source(*, session: Session, through: int) -> BranchSource:
    """The managed state of ``session`` as it was when its last message was at position ``through``.

    While no active checkpoint stands for a message after ``through``, that is the session's state
    now. Otherwise it is the newest snapshot taken at or before that position. Without one, nothing
    says what the checkpoints were then: the goals, decisions and artifacts are now's, and there are
    no checkpoints (every message up to ``through`` back in the context, to be compressed again).
    """
    compressed_last = Checkpoint.objects.filter(session=session, merged_into=None, retired=False).aggregate(
        last=Max("last_position")
    )["last"]
    if compressed_last is None or compressed_last <= through:
        return BranchSource(session_state(session=session), None)
    snapshot = (
        Snapshot.objects.filter(session=session, message_count__lte=through)
        .order_by("-message_count", "-created_at", "-id")
        .first()
    )
    if snapshot is not None:
        return BranchSource(snapshot.state, snapshot)
    now = session_state(session=session)
    states = [[message_id, None, excluded] for message_id, _, excluded in now["messages"]["states"]]
    return BranchSource(
        {
            **now,
            "session": {**now["session"], "compression_count": 0},
            "messages": {**now["messages"], "states": states},
            "checkpoints": [],
        },
        None,
    )
