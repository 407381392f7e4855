"""What a snapshot holds: the session's state, enough to rebuild its active context exactly."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Max

from chat.models import (
    CHECKPOINT_STATE_FIELDS,
    Artifact,
    Checkpoint,
    Decision,
    Goal,
    GoalCheckpoint,
    Message,
    Session,
    Snapshot,
    checkpoint_attname,
)


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
        "checkpoints": [_checkpoint_row(cp) for cp in Checkpoint.objects.filter(session=session).order_by("number")],
        "goals": [
            _goal_row(goal, list(goal.checkpoints.all()))
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


def branch_source(*, session: Session, through: int, goals_now: bool = False) -> BranchSource:
    """The managed state of ``session`` as it was when its last message was at position ``through``.

    While no active checkpoint stands for a message after ``through``, that is the session's state
    now, its goals, decisions and artifacts as they stood then (``_managed_as_of``). Otherwise it is
    the newest snapshot taken at or before that position. Without one, nothing says what the
    checkpoints were then: the goals, decisions and artifacts are as they stood then, and there are
    no checkpoints (every message up to ``through`` back in the context, to be compressed again).
    ``goals_now``: the goals, decisions and artifacts as they are now in those two cases.
    """
    compressed_last = Checkpoint.objects.filter(session=session, merged_into=None, retired=False).aggregate(
        last=Max("last_position")
    )["last"]
    if compressed_last is None or compressed_last <= through:
        now = session_state(session=session)
        return BranchSource(now if goals_now else _managed_as_of(session, now, through), None)
    snapshot = (
        Snapshot.objects.filter(session=session, message_count__lte=through)
        .order_by("-message_count", "-created_at", "-id")
        .first()
    )
    if snapshot is not None:
        return BranchSource(snapshot.state, snapshot)
    now = session_state(session=session)
    now = now if goals_now else _managed_as_of(session, now, through)
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


def _checkpoint_row(checkpoint: Checkpoint) -> dict[str, Any]:
    """What a snapshot keeps of ``checkpoint``: its id and its ``CHECKPOINT_STATE_FIELDS``."""
    return {
        "id": checkpoint.id,
        **{name: getattr(checkpoint, checkpoint_attname(name)) for name in CHECKPOINT_STATE_FIELDS},
    }


def _goal_row(goal: Goal, checkpoints: list[GoalCheckpoint]) -> dict[str, Any]:
    return {
        "id": goal.id,
        "description": goal.description,
        "priority": goal.priority,
        "status": goal.status,
        "next_step": goal.next_step,
        "created_at": goal.created_at.isoformat(),
        "completed_at": goal.completed_at.isoformat() if goal.completed_at else None,
        "checkpoints": [{"description": c.description, "status": c.status} for c in checkpoints],
    }


def _managed_as_of(session: Session, state: dict[str, Any], through: int) -> dict[str, Any]:
    """``state`` (the session's now) with its goals, decisions and artifacts as they stood while its
    last message was at ``through`` (issue 47, item 8: a branch at message 9 inherited a goal and a
    locked decision added after message 11).

    That moment ends when message ``through + 1`` was written: what was created later is left out.
    A row changed since (``updated_at``) is taken as the newest snapshot taken before that moment
    holds it; without one, as it is now, except that the newest goal of then is the active one (a
    new goal is what pauses the one before it)."""
    cutoff: datetime | None = (
        Message.objects.filter(session=session, position=through + 1).values_list("created_at", flat=True).first()
    )
    if cutoff is None:
        return state
    earlier = Snapshot.objects.filter(session=session, created_at__lt=cutoff).order_by("-created_at", "-id").first()
    then: dict[str, Any] = earlier.state if earlier is not None else {}
    goals_then = {row["id"]: row for row in then.get("goals", [])}
    decisions_then = {row["id"]: row for row in then.get("decisions", [])}

    goals = list(Goal.objects.filter(session=session, created_at__lt=cutoff).order_by("created_at", "id"))
    goal_rows = []
    for goal in goals:
        checkpoints = [c for c in goal.checkpoints.order_by("id") if c.created_at < cutoff]
        if goal.updated_at < cutoff:
            goal_rows.append(_goal_row(goal, checkpoints))
        elif goal.id in goals_then:
            goal_rows.append(goals_then[goal.id])
        else:
            row = _goal_row(goal, checkpoints)
            if goal is goals[-1]:
                row.update(status=Goal.Status.ACTIVE.value, completed_at=None)
            elif row["status"] == Goal.Status.ACTIVE:
                row["status"] = Goal.Status.PAUSED.value
            goal_rows.append(row)
    # One active goal, as ever: the newest of those that were.
    active = [row for row in goal_rows if row["status"] == Goal.Status.ACTIVE]
    for row in active[:-1]:
        row["status"] = Goal.Status.PAUSED.value

    decisions = [
        {"id": d.id, "goal": d.goal_id, "description": d.description, "locked": d.locked}
        if d.updated_at < cutoff or d.id not in decisions_then
        else decisions_then[d.id]
        for d in Decision.objects.filter(session=session, created_at__lt=cutoff).order_by("id")
    ]
    artifacts = [
        {"id": a.id, "goal": a.goal_id, "path": a.path, "action": a.action}
        for a in Artifact.objects.filter(session=session, created_at__lt=cutoff).order_by("id")
    ]
    return {**state, "goals": goal_rows, "decisions": decisions, "artifacts": artifacts}
