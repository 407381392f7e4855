from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from chat.models import (
    CHECKPOINT_FIELDS_ADDED_LATER,
    CHECKPOINT_RANGE_FIELDS,
    CHECKPOINT_STATE_FIELDS,
    Artifact,
    Checkpoint,
    CheckpointRevision,
    Decision,
    EventType,
    Goal,
    GoalCheckpoint,
    Message,
    Session,
    Snapshot,
    checkpoint_attname,
)
from chat.selectors.context import session_budget, session_config
from chat.selectors.snapshot_state import session_state, snapshot_message_states
from chat.services.events import event_record
from chat.services.lease import lease_acquire, lease_release
from chat.services.reliability import session_refresh_reliability
from engine.core.config import ContextConfig, auto_snapshot_due
from engine.core.ranges import MessageRange, range_from_label
from engine.core.text import storable_text

SNAPSHOTS_OFF = "snapshots are off in this session's settings"


class SnapshotError(RuntimeError):
    """A snapshot cannot be taken or restored; nothing was changed."""


@transaction.atomic
def snapshot_create(*, session: Session, kind: Snapshot.Kind, reason: str = "") -> Snapshot:
    """Capture the session's full state as an immutable snapshot and record the event.

    Precondition for an automatic one: ``auto_snapshot_due`` said so. Raises SnapshotError
    when the session's ``snapshots.enabled`` is off: then it takes no snapshot of any kind.
    """
    session.refresh_from_db()  # the caller's copy may predate a compression
    if not session_config(session).snapshots.enabled:
        raise SnapshotError(f"no snapshot was taken: {SNAPSHOTS_OFF}")
    state = session_state(session=session)
    snapshot = Snapshot.objects.create(
        session=session,
        kind=kind,
        reason=storable_text(reason)[:200],
        state=state,
        token_count=session_budget(session=session).used,
        message_count=state["messages"]["last_position"],
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


def snapshot_auto_create(*, session: Session, config: ContextConfig, reason: str, usage: float | None = None) -> None:
    """The spec's automatic snapshot, when ``engine.core.config.auto_snapshot_due`` says so
    (``usage``: of the available budget, after a message; None just before a compression).

    Precondition: ``config`` is the session's (``session_config``)."""
    taken = Snapshot.objects.filter(
        session=session, kind=Snapshot.Kind.AUTO, message_count__gt=session.compressed_through
    ).exists
    if auto_snapshot_due(config.snapshots, taken_this_round=taken, usage=usage):
        snapshot_create(session=session, kind=Snapshot.Kind.AUTO, reason=reason)


def _moment(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _restore_rows(model: type[Any], session: Session, rows: list[dict[str, Any]], fields: list[str]) -> None:
    """Make the session's rows of ``model`` exactly ``rows``: same ids, same fields, none more."""
    model.objects.filter(session=session).exclude(pk__in=[row["id"] for row in rows]).delete()
    for row in rows:
        model.objects.update_or_create(
            pk=row["id"], defaults={"session": session, **{name: row[name] for name in fields}}
        )


def snapshot_restore(*, snapshot: Snapshot) -> Snapshot | None:
    """Return the session's active context to the snapshot's; returns the snapshot taken just before.

    The current state is snapshotted first, so a restore can itself be undone;
    when the session's ``snapshots.enabled`` is off none is taken, None is
    returned and the ``snapshot-restored`` event's ``undo_snapshot`` is None:
    such a restore cannot be undone (the restore page says so before).
    Messages written after the snapshot stay in the full history, out of the
    active context; checkpoints created after it are retired. It takes the
    session's lease, so it never overlaps a compression. All of it
    happens in one transaction; if anything fails nothing changes, a
    ``snapshot-error`` event says why and SnapshotError is raised.
    """
    token = lease_acquire(session_id=snapshot.session_id)
    if token is None:
        reason = "a compression of this session is running; restore when it has finished"
        event_record(
            session=snapshot.session, type=EventType.SNAPSHOT_ERROR, payload={"snapshot": snapshot.id, "reason": reason}
        )
        raise SnapshotError(f"snapshot {snapshot.id} was not restored: {reason}")
    try:
        return _restore(snapshot)
    except Exception as exc:
        event_record(
            session=snapshot.session,
            type=EventType.SNAPSHOT_ERROR,
            payload={"snapshot": snapshot.id, "reason": f"{type(exc).__name__}: {exc}"},
        )
        raise SnapshotError(f"snapshot {snapshot.id} could not be restored: {type(exc).__name__}: {exc}") from exc
    finally:
        lease_release(session_id=snapshot.session_id, token=token)


@transaction.atomic
def _restore(snapshot: Snapshot) -> Snapshot | None:
    """Precondition: called by snapshot_restore. Locks the session row for the transaction."""
    session = Session.objects.select_for_update().get(pk=snapshot.session_id)
    state = snapshot.state
    saved_session = state["session"]
    messages = snapshot_message_states(snapshot=snapshot)
    checkpoints = {row["id"]: row for row in state["checkpoints"]}
    # Decided by the settings now, not the snapshot's (which the restore brings back).
    before = (
        snapshot_create(session=session, kind=Snapshot.Kind.AUTO, reason=f"Before restoring snapshot {snapshot.id}")
        if session_config(session).snapshots.enabled
        else None
    )

    Session.objects.filter(pk=session.pk).update(
        system_prompt=saved_session["system_prompt"],
        system_prompt_tokens=saved_session["system_prompt_tokens"],
        settings=saved_session["settings"],
        compression_count=saved_session["compression_count"],
        # What the restored context has compressed is not known here: the next compression may run.
        compressed_through=0,
        context_size=saved_session["context_size"],
        max_tokens=saved_session["max_tokens"],
    )
    excluded = 0
    version = session.next_context_version()
    rows = Message.objects.filter(session=session).values_list("id", "compressed_into_id", "excluded_from_context")
    for message_id, compressed_into, was_excluded in rows:
        # Messages written after the snapshot keep their checkpoint but leave the context.
        target = messages.get(message_id, (compressed_into, True))
        excluded += message_id not in messages
        if target != (compressed_into, was_excluded):
            Message.objects.filter(pk=message_id).update(
                compressed_into=target[0], excluded_from_context=target[1], context_version=version
            )
    retired = 0
    for checkpoint in Checkpoint.objects.filter(session=session):
        saved = checkpoints.get(checkpoint.id)
        if saved is None:
            checkpoint.retired = True
            checkpoint.save(update_fields=["retired"])
            retired += 1
            continue
        # Snapshots taken before the fact ledger existed hold no facts or ledger: those stay as they are.
        saved = {**{name: getattr(checkpoint, name) for name in CHECKPOINT_FIELDS_ADDED_LATER}, **saved}
        if "range_label" in saved:  # taken before ranges were integers: the label is all it holds
            checkpoint.message_range = range_from_label(saved["range_label"])
        else:
            checkpoint.message_range = MessageRange(saved["first_position"], saved["last_position"], saved["origin"])
        changed = (
            checkpoint.summary != saved["summary"]
            or checkpoint.level != saved["level"]
            or checkpoint.ledger != saved["ledger"]
        )
        for name in CHECKPOINT_STATE_FIELDS:
            if name not in CHECKPOINT_RANGE_FIELDS:
                setattr(checkpoint, checkpoint_attname(name), saved[name])
        checkpoint.save()
        if changed:
            CheckpointRevision.objects.create(
                checkpoint=checkpoint,
                level=checkpoint.level,
                tokens=checkpoint.current_tokens,
                summary=checkpoint.summary,
                reason=CheckpointRevision.Reason.RESTORED,
                retention=checkpoint.retention,
            )

    # A goal completed after the snapshot comes back active and undated (snapshots before completed_at: undated).
    goals = [{**g, "completed_at": _moment(g.get("completed_at"))} for g in state["goals"]]
    _restore_rows(Goal, session, goals, ["description", "priority", "status", "next_step", "completed_at"])
    for row in state["goals"]:
        GoalCheckpoint.objects.filter(goal_id=row["id"]).delete()
        GoalCheckpoint.objects.bulk_create(
            GoalCheckpoint(goal_id=row["id"], description=c["description"], status=c["status"])
            for c in row["checkpoints"]
        )
    _restore_rows(
        Decision,
        session,
        [{**d, "goal_id": d["goal"]} for d in state["decisions"]],
        ["goal_id", "description", "locked"],
    )
    _restore_rows(
        Artifact, session, [{**a, "goal_id": a["goal"]} for a in state["artifacts"]], ["goal_id", "path", "action"]
    )

    session.refresh_from_db()
    session_refresh_reliability(session=session)
    event_record(
        session=session,
        type=EventType.SNAPSHOT_RESTORED,
        payload={
            "snapshot": snapshot.id,
            "undo_snapshot": before.id if before is not None else None,
            "messages_excluded": excluded,
            "checkpoints_retired": retired,
        },
    )
    return before
