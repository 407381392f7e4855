"""Goals, goal checkpoints, decisions and artifacts, whether set by the user or by markers in a reply."""

from __future__ import annotations

from typing import Literal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from chat.models import Session
from chat.services import storable_text
from contextmgr.core.markers import ArtifactRecord, CheckpointUpdate, DecisionUpdate, GoalSet, NextStep, parse_markers
from contextmgr.models import MAX_GOAL_CHARS, MAX_PATH_CHARS, Artifact, Decision, Goal, GoalCheckpoint
from contextmgr.selectors import active_goal

Source = Literal["user", "marker"]


def _text(field: str, value: str, limit: int = MAX_GOAL_CHARS) -> str:
    value = storable_text(value).strip()
    if not value:
        raise ValidationError({field: f"{field} is empty."})
    if len(value) > limit:
        raise ValidationError({field: f"{field} is {len(value):,} characters long; the limit is {limit:,}."})
    return value


@transaction.atomic
def goal_create(*, session: Session, description: str, priority: str = Goal.Priority.MEDIUM) -> Goal:
    """Make a new active goal; the previously active one is paused (one active goal per session)."""
    description = _text("description", description)
    if priority not in Goal.Priority.values:
        raise ValidationError({"priority": f"priority must be one of {', '.join(Goal.Priority.values)}."})
    Goal.objects.filter(session=session, status=Goal.Status.ACTIVE).update(status=Goal.Status.PAUSED)
    return Goal.objects.create(session=session, description=description, priority=priority)


@transaction.atomic
def goal_set_status(*, goal: Goal, status: str) -> Goal:
    if status not in Goal.Status.values:
        raise ValidationError({"status": f"status must be one of {', '.join(Goal.Status.values)}."})
    if status == Goal.Status.ACTIVE:
        Goal.objects.filter(session=goal.session, status=Goal.Status.ACTIVE).exclude(pk=goal.pk).update(
            status=Goal.Status.PAUSED
        )
    goal.status = status
    goal.completed_at = timezone.now() if status == Goal.Status.COMPLETED else None
    goal.save(update_fields=["status", "completed_at", "updated_at"])
    return goal


@transaction.atomic
def goal_checkpoint_set(*, goal: Goal, description: str, status: str = GoalCheckpoint.Status.PENDING) -> GoalCheckpoint:
    """Add a goal checkpoint, or update the status of the one with the same description."""
    description = _text("description", description)
    if status not in GoalCheckpoint.Status.values:
        raise ValidationError({"status": f"status must be one of {', '.join(GoalCheckpoint.Status.values)}."})
    checkpoint = goal.checkpoints.filter(description__iexact=description).first()
    if checkpoint is None:
        return GoalCheckpoint.objects.create(goal=goal, description=description, status=status)
    checkpoint.status = status
    checkpoint.save(update_fields=["status", "updated_at"])
    return checkpoint


@transaction.atomic
def decision_record(
    *, session: Session, description: str, locked: bool = False, goal: Goal | None = None, source: Source = "user"
) -> Decision:
    """Record a decision, or update the lock of the one with the same description.

    A locked decision is never changed by a marker; only the user unlocks it.
    """
    description = _text("description", description)
    decision = Decision.objects.filter(session=session, description__iexact=description).first()
    if decision is None:
        return Decision.objects.create(session=session, goal=goal, description=description, locked=locked)
    if decision.locked and source == "marker":
        return decision
    decision.locked = locked
    decision.save(update_fields=["locked", "updated_at"])
    return decision


@transaction.atomic
def decision_set_locked(*, decision: Decision, locked: bool) -> Decision:
    decision.locked = locked
    decision.save(update_fields=["locked", "updated_at"])
    return decision


@transaction.atomic
def artifact_record(*, session: Session, path: str, action: str, goal: Goal | None = None) -> Artifact:
    path = _text("path", path, MAX_PATH_CHARS)
    if action not in Artifact.Action.values:
        raise ValidationError({"action": f"action must be one of {', '.join(Artifact.Action.values)}."})
    latest = Artifact.objects.filter(session=session, path=path).order_by("-id").first()
    if latest is not None and latest.action == action:
        return latest
    return Artifact.objects.create(session=session, goal=goal, path=path, action=action)


@transaction.atomic
def goal_apply_markers(*, session: Session, text: str) -> int:
    """Apply the goal markers found in an assistant reply; returns how many were applied.

    Checkpoint and next-step markers need an active goal and are ignored without one.
    """
    applied = 0
    goal = active_goal(session=session)
    for update in parse_markers(text):
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
            goal.next_step = update.text
            goal.save(update_fields=["next_step", "updated_at"])
        applied += 1
    return applied
