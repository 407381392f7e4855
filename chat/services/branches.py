"""A branch's managed state: what its parent's goals, decisions, artifacts and checkpoints were at the fork."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from datetime import datetime
from typing import Any, TypeVar

from django.db import models, transaction

from chat.models import (
    CHECKPOINT_FIELDS_ADDED_LATER,
    CHECKPOINT_RANGE_FIELDS,
    CHECKPOINT_STATE_FIELDS,
    Artifact,
    Checkpoint,
    CheckpointRevision,
    Decision,
    Goal,
    GoalCheckpoint,
    Message,
    Session,
)
from chat.selectors.snapshot_state import branch_source
from chat.services.reliability import session_refresh_reliability
from engine.core.ranges import MessageRange, range_from_label

# Message rows a context_branch updates per statement.
UPDATE_BATCH = 500

_Row = TypeVar("_Row", bound=models.Model)


def branch_copy(row: _Row, *, leave: Collection[str] = (), **changes: Any) -> _Row:
    """A branch's copy of ``row``, not saved: the values of all its fields but the primary key, the fields named
    in ``leave`` (at their defaults: what the branch sets itself) and those of ``changes`` (given instead, such
    as ``session=branch``)."""
    kept = {
        field.attname: getattr(row, field.attname)
        for field in row._meta.concrete_fields
        if not field.primary_key and field.name not in leave and not {field.name, field.attname} & changes.keys()
    }
    return type(row)(**kept, **changes)


def _saved_range(row: dict[str, Any]) -> MessageRange:
    if "range_label" in row:  # a snapshot taken before ranges were integers: the label is all it holds
        return range_from_label(row["range_label"])
    return MessageRange(row["first_position"], row["last_position"], row["origin"])


def _copy_checkpoints(
    parent: Session, branch: Session, rows: list[dict[str, Any]], through: int, as_of: datetime | None
) -> dict[int, int]:
    """The checkpoints of ``rows`` that stand for a message up to ``through`` (or for none of the
    parent's), each with its revisions up to ``as_of``; the new id of each old one."""
    new_ids: dict[int, int] = {}
    merged: list[tuple[Checkpoint, int]] = []
    for row in rows:
        span = _saved_range(row)
        if span.first is not None and span.first > through:
            continue
        checkpoint = Checkpoint(session=branch)
        checkpoint.message_range = span
        for name in CHECKPOINT_STATE_FIELDS:
            if name in CHECKPOINT_RANGE_FIELDS or name == "merged_into":  # merged_into: set once its copy exists
                continue
            # Snapshots taken before the fact ledger existed hold no facts or ledger.
            setattr(checkpoint, name, row.get(name, []) if name in CHECKPOINT_FIELDS_ADDED_LATER else row[name])
        checkpoint.save()
        new_ids[row["id"]] = checkpoint.id
        if row["merged_into"] is not None:
            merged.append((checkpoint, row["merged_into"]))
        revisions = CheckpointRevision.objects.filter(checkpoint_id=row["id"], checkpoint__session=parent)
        if as_of is not None:
            revisions = revisions.filter(created_at__lte=as_of)
        # Each revision's copy is made now (created_at), as its checkpoint's is.
        CheckpointRevision.objects.bulk_create(
            branch_copy(revision, leave=("created_at",), checkpoint=checkpoint) for revision in revisions.order_by("id")
        )
    for checkpoint, into in merged:
        # The ultra checkpoint always starts at or before what it merged, so it was copied too.
        checkpoint.merged_into_id = new_ids[into]
        checkpoint.save(update_fields=["merged_into"])
    return new_ids


def _copy_goals(branch: Session, state: dict[str, Any]) -> None:
    goal_ids: dict[int, int] = {}
    for row in state["goals"]:
        goal = Goal.objects.create(
            session=branch,
            description=row["description"],
            priority=row["priority"],
            status=row["status"],
            next_step=row["next_step"],
            completed_at=datetime.fromisoformat(row["completed_at"]) if row.get("completed_at") else None,
        )
        goal_ids[row["id"]] = goal.id
        GoalCheckpoint.objects.bulk_create(
            GoalCheckpoint(goal=goal, description=c["description"], status=c["status"]) for c in row["checkpoints"]
        )
    Decision.objects.bulk_create(
        Decision(session=branch, goal_id=goal_ids.get(d["goal"]), description=d["description"], locked=d["locked"])
        for d in state["decisions"]
    )
    Artifact.objects.bulk_create(
        Artifact(session=branch, goal_id=goal_ids.get(a["goal"]), path=a["path"], action=a["action"])
        for a in state["artifacts"]
    )


@transaction.atomic
def context_branch(*, parent: Session, branch: Session, through: int, goals_now: bool = False) -> None:
    """Give ``branch`` the managed state ``parent`` had when its last message was at ``through``
    (``chat.selectors.snapshot_state.branch_source``): its goals with their progress, its decisions and
    artifacts, its checkpoints (with their revisions), and each message's place in the context:
    what was compressed into a checkpoint then stays compressed in the branch. ``goals_now``: the goals,
    decisions and artifacts as they are now (``session_branch``).

    Precondition: ``branch`` was just created (chat.services.sessions.session_branch) and holds copies of
    ``parent``'s messages 1..``through`` at the same positions, and nothing of its own yet."""
    source = branch_source(session=parent, through=through, goals_now=goals_now)
    state = source.state
    as_of = source.snapshot.created_at if source.snapshot is not None else None
    new_ids = _copy_checkpoints(parent, branch, state["checkpoints"], through, as_of)
    _copy_goals(branch, state)

    parent_rows = Message.objects.filter(session=parent, position__lte=through)
    # Messages written after the snapshot have no place in it: they are as they are now, uncompressed.
    places: dict[int, tuple[int, int | None, bool]] = {
        message_id: (position, None, excluded)
        for message_id, position, excluded in parent_rows.values_list("id", "position", "excluded_from_context")
    }
    for message_id, compressed_into, excluded in state["messages"]["states"]:
        if message_id in places:
            places[message_id] = (places[message_id][0], new_ids.get(compressed_into or 0), excluded)
    placed: dict[tuple[int | None, bool], list[int]] = defaultdict(list)
    for position, checkpoint_id, excluded in places.values():
        if checkpoint_id is not None or excluded:
            placed[(checkpoint_id, excluded)].append(position)
    locked = Session.objects.select_for_update().get(pk=branch.pk)
    compressed_through = min(parent.compressed_through, through) if source.snapshot is None else 0
    version = locked.next_context_version(
        compression_count=state["session"]["compression_count"],
        # A branch read from a snapshot does not know what it compressed since: the next compression may run.
        compressed_through=compressed_through if state["checkpoints"] else 0,
    )
    for (checkpoint_id, excluded), at in placed.items():
        for start in range(0, len(at), UPDATE_BATCH):
            Message.objects.filter(session=branch, position__in=at[start : start + UPDATE_BATCH]).update(
                compressed_into_id=checkpoint_id, excluded_from_context=excluded, context_version=version
            )
    branch.compression_count, branch.compressed_through = locked.compression_count, locked.compressed_through
    session_refresh_reliability(session=branch)
