"""Goals, goal checkpoints, decisions and artifacts, whether set by the user or by markers in a reply."""

from __future__ import annotations

from typing import Literal, cast
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from chat.models import MAX_GOAL_CHARS, MAX_PATH_CHARS, Artifact, Decision, Goal, GoalCheckpoint, Session
from chat.selectors.context import active_goal
from chat.services.events import goals_publish
from engine.core.markers import (
    ArtifactRecord,
    CheckpointUpdate,
    DecisionUpdate,
    GoalSet,
    GoalUpdate,
    NextStep,
    SummaryOutput,
    checkpoint_advances,
    parse_markers,
)
from engine.core.prompts import GoalCheckpointStatus
from engine.core.text import storable_text

Source = Literal["user", "marker"]


def _pinned_block_changes(session_id: UUID) -> None:
    """The goal block and the locked decisions are part of the context: raise the session's
    context version, as every write to the context does (a turn tells by it that the goals
    changed while the reply streamed), and tell the session's open pages once it is committed.

    Precondition: inside the caller's transaction, which keeps the session row locked to its end.
    Called first, before any goal row is read or written: every writer of a session's context
    locks the session row before its other rows (no lock-order deadlock on PostgreSQL), and the
    "does it exist yet?" reads below are serialised by it.
    """
    Session.objects.select_for_update().get(pk=session_id).next_context_version()
    # Every open page of the session shows the goals anew, once the change is there to read.
    transaction.on_commit(lambda: goals_publish(session_id=session_id))


def _text(field: str, value: str, limit: int = MAX_GOAL_CHARS) -> str:
    value = storable_text(value).strip()
    if not value:
        raise ValidationError({field: f"{field} is empty."})
    if len(value) > limit:
        raise ValidationError({field: f"{field} is {len(value):,} characters long; the limit is {limit:,}."})
    return value


CURRENT_GOAL_OUTCOMES = (Goal.Status.PAUSED, Goal.Status.COMPLETED)


@transaction.atomic
def goal_create(
    *,
    session: Session,
    description: str,
    priority: str = Goal.Priority.MEDIUM,
    current_becomes: str = Goal.Status.PAUSED,
) -> Goal:
    """Make a new active goal; the previously active one becomes ``current_becomes``: paused (the
    default) or completed (one active goal per session)."""
    _pinned_block_changes(session.pk)
    description = _text("description", description)
    _choice("priority", priority, Goal.Priority.values)
    _choice("current_becomes", current_becomes, [str(outcome) for outcome in CURRENT_GOAL_OUTCOMES])
    completed_at = timezone.now() if current_becomes == Goal.Status.COMPLETED else None
    # updated_at too (update() skips auto_now): a branch reads from it when the goal last changed.
    Goal.objects.filter(session=session, status=Goal.Status.ACTIVE).update(
        status=current_becomes, completed_at=completed_at, updated_at=timezone.now()
    )
    return Goal.objects.create(session=session, description=description, priority=priority)


def _choice(field: str, value: str, choices: list[str]) -> str:
    if value not in choices:
        raise ValidationError({field: f"{field} must be one of {', '.join(choices)}."})
    return value


@transaction.atomic
def goal_update(
    *, goal: Goal, description: str | None = None, priority: str | None = None, status: str | None = None
) -> Goal:
    """Edit a goal; ``None`` leaves a field as it is. Activating a goal pauses the active one."""
    _pinned_block_changes(goal.session_id)
    if description is not None:
        goal.description = _text("description", description)
    if priority is not None:
        goal.priority = _choice("priority", priority, Goal.Priority.values)
    if status is not None:
        goal.status = _choice("status", status, Goal.Status.values)
        if status == Goal.Status.ACTIVE:
            Goal.objects.filter(session=goal.session, status=Goal.Status.ACTIVE).exclude(pk=goal.pk).update(
                status=Goal.Status.PAUSED, updated_at=timezone.now()
            )
        goal.completed_at = timezone.now() if status == Goal.Status.COMPLETED else None
    goal.save()
    return goal


@transaction.atomic
def goal_delete(*, goal: Goal) -> None:
    """Delete a goal and its checkpoints; its decisions and artifacts stay with the session."""
    _pinned_block_changes(goal.session_id)
    goal.delete()


@transaction.atomic
def goal_checkpoint_set(*, goal: Goal, description: str, status: str = GoalCheckpoint.Status.PENDING) -> GoalCheckpoint:
    """Add a goal checkpoint, or update the status of the one with the same description."""
    _pinned_block_changes(goal.session_id)
    description = _text("description", description)
    _choice("status", status, GoalCheckpoint.Status.values)
    checkpoint = goal.checkpoints.filter(description__iexact=description).first()
    if checkpoint is None:
        return GoalCheckpoint.objects.create(goal=goal, description=description, status=status)
    return goal_checkpoint_update(checkpoint=checkpoint, status=status)


@transaction.atomic
def goal_checkpoint_update(
    *, checkpoint: GoalCheckpoint, description: str | None = None, status: str | None = None
) -> GoalCheckpoint:
    _pinned_block_changes(checkpoint.goal.session_id)
    if description is not None:
        checkpoint.description = _text("description", description)
    if status is not None:
        checkpoint.status = _choice("status", status, GoalCheckpoint.Status.values)
    checkpoint.save()
    return checkpoint


@transaction.atomic
def decision_record(
    *, session: Session, description: str, locked: bool = False, goal: Goal | None = None, source: Source = "user"
) -> Decision:
    """Record a decision, or update the lock of the one with the same description.

    A locked decision is never changed by a marker; only the user unlocks it.
    """
    _pinned_block_changes(session.pk)
    description = _text("description", description)
    decision = Decision.objects.filter(session=session, description__iexact=description).first()
    if decision is None:
        return Decision.objects.create(session=session, goal=goal, description=description, locked=locked)
    if decision.locked and source == "marker":
        return decision
    return decision_update(decision=decision, locked=locked)


@transaction.atomic
def decision_update(*, decision: Decision, description: str | None = None, locked: bool | None = None) -> Decision:
    """The user's edit of a decision (markers go through ``decision_record``, which respects the lock)."""
    _pinned_block_changes(decision.session_id)
    if description is not None:
        decision.description = _text("description", description)
    if locked is not None:
        decision.locked = locked
    decision.save()
    return decision


@transaction.atomic
def artifact_record(*, session: Session, path: str, action: str, goal: Goal | None = None) -> Artifact:
    _pinned_block_changes(session.pk)
    path = _text("path", path, MAX_PATH_CHARS)
    _choice("action", action, Artifact.Action.values)
    latest = Artifact.objects.filter(session=session, path=path).order_by("-id").first()
    if latest is not None and latest.action == action:
        return latest
    return Artifact.objects.create(session=session, goal=goal, path=path, action=action)


def goal_apply_markers(*, session: Session, text: str, applied_before: str = "") -> int:
    """Apply the goal markers found in an assistant reply; returns how many were applied.
    ``applied_before``: the start of the reply, whose markers were applied when it was stored (a reply
    continued after its cap): they are not applied twice.

    Checkpoint and next-step markers need an active goal and are ignored without one.
    """
    updates = parse_markers(text)
    for seen in parse_markers(applied_before):
        if seen in updates:
            updates.remove(seen)
    if not updates:  # most replies: nothing to read, and no transaction to open
        return 0
    return _markers_apply(session, updates)


@transaction.atomic
def _markers_apply(session: Session, updates: list[GoalUpdate]) -> int:
    """``goal_apply_markers``' writes, in one transaction that locks the session row first."""
    _pinned_block_changes(session.pk)
    applied = 0
    goal = active_goal(session=session)
    for update in updates:
        if isinstance(update, GoalSet):
            if goal is None or goal.description.casefold() != update.description.casefold():
                goal = goal_create(session=session, description=update.description)
        elif isinstance(update, DecisionUpdate):
            decision_record(
                session=session, description=update.description, locked=update.locked, goal=goal, source="marker"
            )
        elif isinstance(update, ArtifactRecord):
            artifact_record(session=session, path=update.path, action=update.action, goal=goal)
        elif goal is None:
            continue
        elif isinstance(update, CheckpointUpdate):
            goal_checkpoint_set(goal=goal, description=update.description, status=update.status)
        elif isinstance(update, NextStep):
            goal.next_step = storable_text(update.text)  # the reply's raw text
            goal.save(update_fields=["next_step", "updated_at"])
        applied += 1
    return applied


@transaction.atomic
def goal_apply_summary(*, session: Session, output: SummaryOutput) -> list[str]:
    """Apply what a compression's goal-aware summary says its messages settled (the spec's
    "Updated During Compression": checkpoint status, new decisions, new artifacts), as a marker in
    a reply would: a goal checkpoint it names moves forward (never back, never a new one), a
    decision is recorded (a locked one never changes), an artifact is recorded. Returns one line
    per change, for the compression's event; nothing for what is already so.

    Precondition: called inside the compression's transaction, so that a failed compression
    leaves the goals as they were. Locks the session row first, as every writer of the context.
    """
    if not (output.checkpoints or output.decisions or output.artifacts):
        return []
    _pinned_block_changes(session.pk)
    changes = []
    goal = active_goal(session=session)
    if goal is not None:
        stored = {cp.description: cp for cp in goal.checkpoints.all()}
        statuses = {name: cast(GoalCheckpointStatus, cp.status) for name, cp in stored.items()}
        for update in checkpoint_advances(output.checkpoints, statuses):
            goal_checkpoint_update(checkpoint=stored[update.description], status=update.status)
            changes.append(f"checkpoint “{update.description}” {update.status}")
    for decision in output.decisions:
        existing = Decision.objects.filter(session=session, description__iexact=decision.description).first()
        if existing is not None and (existing.locked or not decision.locked):
            continue
        decision_record(
            session=session, description=decision.description, locked=decision.locked, goal=goal, source="marker"
        )
        changes.append(f"decision “{decision.description}”{' locked' if decision.locked else ''}")
    for artifact in output.artifacts:
        latest = Artifact.objects.filter(session=session, path=artifact.path).order_by("-id").first()
        if latest is not None and latest.action == artifact.action:
            continue
        artifact_record(session=session, path=artifact.path, action=artifact.action, goal=goal)
        changes.append(f"artifact {artifact.action} {artifact.path}")
    return changes


@transaction.atomic
def goals_carry_over(*, source: Session, target: Session) -> None:
    """Copy into ``target`` what a continued session keeps of ``source``: the active goal with
    its progress, and the locked decisions."""
    goal = active_goal(session=source)
    if goal is not None:
        carried = Goal.objects.create(
            session=target, description=goal.description, priority=goal.priority, next_step=goal.next_step
        )
        GoalCheckpoint.objects.bulk_create(
            GoalCheckpoint(goal=carried, description=cp.description, status=cp.status) for cp in goal.checkpoints.all()
        )
    Decision.objects.bulk_create(
        Decision(session=target, description=d.description, locked=True)
        for d in Decision.objects.filter(session=source, locked=True)
    )
