"""REST endpoints for the context: budget, prompt, compression, checkpoints, goals, snapshots and events."""

# No `from __future__ import annotations` here: ninja reads the views' annotations
# as real types to build their parameter models.

from typing import Annotated, Any
from uuid import UUID

from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Router, Status
from ninja.pagination import paginate
from ninja.params.functions import Query

from accounts.auth import api_user
from chat.api.context_schemas import (
    ArtifactIn,
    ArtifactOut,
    CheckpointOut,
    CompressResult,
    CompressScheduled,
    ContextOut,
    DecisionIn,
    DecisionOut,
    DecisionPatch,
    EventCursor,
    EventOut,
    GoalCheckpointIn,
    GoalCheckpointOut,
    GoalCheckpointPatch,
    GoalIn,
    GoalOut,
    GoalPatch,
    ObjectId,
    PromptOut,
    RestoreOut,
    SnapshotIn,
    SnapshotOut,
)
from chat.api.pagination import Pages
from chat.models import Checkpoint, ContextEvent, Decision, Goal, GoalCheckpoint, Snapshot
from chat.selectors.context import (
    owned_decision,
    owned_goal,
    owned_goal_checkpoint,
    owned_snapshot,
    session_checkpoints,
    session_events,
    session_goals,
    session_last_event_id,
    session_snapshots,
)
from chat.selectors.prompt import session_prompt
from chat.selectors.recall import DRAFT_MAX_CHARS, session_prompt_for
from chat.selectors.sessions import session_for_owner
from chat.services.compression import compression_run, compression_schedule
from chat.services.goals import (
    artifact_record,
    decision_record,
    decision_update,
    goal_checkpoint_set,
    goal_checkpoint_update,
    goal_create,
    goal_delete,
    goal_update,
)
from chat.services.snapshots import snapshot_create, snapshot_restore

router = Router(tags=["context"])


@router.get("/sessions/{session_id}/context", response=ContextOut, summary="Get the context budget and reliability")
def context_detail(request: HttpRequest, session_id: UUID) -> ContextOut:
    """The budget from stored counts, the reliability score and the context line."""
    return ContextOut.of(session_for_owner(user=api_user(request), session_id=session_id))


@router.get("/sessions/{session_id}/prompt", response=PromptOut, summary="Get the next prompt")
def prompt_detail(
    request: HttpRequest,
    session_id: UUID,
    draft: Annotated[str | None, Query(None, max_length=DRAFT_MAX_CHARS, description="A message not sent yet.")] = None,
) -> PromptOut:
    """The exact messages the next call sends (system, goal and checkpoint blocks travel as one system message).
    With ``draft``: the prompt the next turn would send for that message, with what the full history recalls
    for it; nothing is stored and the model is not asked."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    if draft is None:
        return PromptOut.of(session_prompt(session=session))
    return PromptOut.of(session_prompt_for(session=session, draft=draft))


@router.post(
    "/sessions/{session_id}/compress",
    response={200: CompressResult, 202: CompressScheduled},
    summary="Compress the context now",
)
def compress(request: HttpRequest, session_id: UUID, wait: bool = False) -> Any:
    """Compress now, due or not: in the background (202), or with ``?wait=true`` answering with the outcome (200)."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    if not wait:
        before = session_last_event_id(session=session)
        compression_schedule(session_id=session.pk, reason="requested", force=True)
        return Status(202, CompressScheduled(event_id=before))
    outcome = compression_run(session_id=session.pk, reason="requested", force=True)
    session.refresh_from_db()
    return Status(
        200,
        CompressResult(
            status=outcome.status,
            reason=outcome.reason,
            checkpoint_id=outcome.checkpoint_id,
            context=ContextOut.of(session),
        ),
    )


@router.get("/sessions/{session_id}/checkpoints", response=list[CheckpointOut], summary="List a session's checkpoints")
@paginate(Pages)
def checkpoints_list(request: HttpRequest, session_id: UUID) -> QuerySet[Checkpoint]:
    """Every checkpoint, merged and retired ones too, oldest first, with its revisions."""
    return session_checkpoints(session=session_for_owner(user=api_user(request), session_id=session_id))


@router.get("/sessions/{session_id}/goals", response=list[GoalOut], summary="List a session's goals")
@paginate(Pages)
def goals_list(request: HttpRequest, session_id: UUID) -> QuerySet[Goal]:
    """Oldest first, each with its checkpoints, decisions and artifacts."""
    return session_goals(session=session_for_owner(user=api_user(request), session_id=session_id))


@router.post("/sessions/{session_id}/goals", response={201: GoalOut}, summary="Set a new goal")
def goal_create_view(request: HttpRequest, session_id: UUID, payload: GoalIn) -> Any:
    """A new active goal; the one active before is paused."""
    goal = goal_create(
        session=session_for_owner(user=api_user(request), session_id=session_id),
        description=payload.description,
        priority=payload.priority,
    )
    return Status(201, goal)


@router.patch("/goals/{goal_id}", response=GoalOut, summary="Change a goal")
def goal_patch(request: HttpRequest, goal_id: ObjectId, payload: GoalPatch) -> Goal:
    """Fields left out stay as they are; activating a goal pauses the active one."""
    return goal_update(
        goal=owned_goal(user=api_user(request), goal_id=goal_id),
        description=payload.description,
        priority=payload.priority,
        status=payload.status,
    )


@router.delete("/goals/{goal_id}", response={204: None}, summary="Delete a goal")
def goal_delete_view(request: HttpRequest, goal_id: ObjectId) -> Any:
    """Delete a goal and its checkpoints; its decisions and artifacts stay with the session."""
    goal_delete(goal=owned_goal(user=api_user(request), goal_id=goal_id))
    return Status(204, None)


@router.post("/goals/{goal_id}/checkpoints", response={201: GoalCheckpointOut}, summary="Add a goal checkpoint")
def goal_checkpoint_create(request: HttpRequest, goal_id: ObjectId, payload: GoalCheckpointIn) -> Any:
    """Add a goal checkpoint, or set the status of the one with the same description."""
    goal = owned_goal(user=api_user(request), goal_id=goal_id)
    return Status(201, goal_checkpoint_set(goal=goal, description=payload.description, status=payload.status))


@router.patch("/goal-checkpoints/{checkpoint_id}", response=GoalCheckpointOut, summary="Change a goal checkpoint")
def goal_checkpoint_patch(
    request: HttpRequest, checkpoint_id: ObjectId, payload: GoalCheckpointPatch
) -> GoalCheckpoint:
    """Its description or status; fields left out stay as they are."""
    checkpoint = owned_goal_checkpoint(user=api_user(request), checkpoint_id=checkpoint_id)
    return goal_checkpoint_update(checkpoint=checkpoint, description=payload.description, status=payload.status)


@router.post("/goals/{goal_id}/decisions", response={201: DecisionOut}, summary="Record a decision")
def decision_create(request: HttpRequest, goal_id: ObjectId, payload: DecisionIn) -> Any:
    """Record a decision, or set the lock of the one with the same description. Locked ones are never compressed."""
    goal = owned_goal(user=api_user(request), goal_id=goal_id)
    decision = decision_record(session=goal.session, goal=goal, description=payload.description, locked=payload.locked)
    return Status(201, decision)


@router.patch("/decisions/{decision_id}", response=DecisionOut, summary="Change or unlock a decision")
def decision_patch(request: HttpRequest, decision_id: ObjectId, payload: DecisionPatch) -> Decision:
    """Your edit of a decision, locked or not: markers in the model's replies never change a locked one."""
    return decision_update(
        decision=owned_decision(user=api_user(request), decision_id=decision_id),
        description=payload.description,
        locked=payload.locked,
    )


@router.post("/goals/{goal_id}/artifacts", response={201: ArtifactOut}, summary="Record an artifact")
def artifact_create(request: HttpRequest, goal_id: ObjectId, payload: ArtifactIn) -> Any:
    """A file the goal created or modified; the same action on the same path again answers the
    artifact already recorded."""
    goal = owned_goal(user=api_user(request), goal_id=goal_id)
    return Status(201, artifact_record(session=goal.session, goal=goal, path=payload.path, action=payload.action))


@router.get("/sessions/{session_id}/snapshots", response=list[SnapshotOut], summary="List a session's snapshots")
@paginate(Pages)
def snapshots_list(request: HttpRequest, session_id: UUID) -> QuerySet[Snapshot]:
    """Newest first, the automatic ones (taken before each compression) and yours."""
    return session_snapshots(session=session_for_owner(user=api_user(request), session_id=session_id))


@router.post("/sessions/{session_id}/snapshots", response={201: SnapshotOut}, summary="Take a snapshot")
def snapshot_create_view(request: HttpRequest, session_id: UUID, payload: SnapshotIn) -> Any:
    """An immutable snapshot of the session's whole state; 409 when the session's snapshots are off."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    return Status(201, snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason=payload.reason))


@router.post("/snapshots/{snapshot_id}/restore", response=RestoreOut, summary="Restore a snapshot")
def snapshot_restore_view(request: HttpRequest, snapshot_id: ObjectId) -> Any:
    """Return the active context to the snapshot's; a snapshot of the state before is taken first (the undo),
    unless the session's snapshots are off (then `undo_snapshot` is null and the restore cannot be undone)."""
    snapshot = owned_snapshot(user=api_user(request), snapshot_id=snapshot_id)
    undo = snapshot_restore(snapshot=snapshot)
    session = snapshot.session
    session.refresh_from_db()
    return {"restored": snapshot, "undo_snapshot": undo, "context": ContextOut.of(session)}


@router.get("/sessions/{session_id}/events", response=list[EventOut], summary="List a session's events")
@paginate(Pages)
def events_list(request: HttpRequest, session_id: UUID, after: EventCursor = 0) -> QuerySet[ContextEvent]:
    """The session's events in order, those after event ``after`` only when it is given."""
    return session_events(session=session_for_owner(user=api_user(request), session_id=session_id), after=after)
