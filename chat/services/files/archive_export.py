"""The archive of a session (``chat.formats.archive_file.SessionArchive``), built from the database: everything of the
session, every id the archive's own (see ``chat.services.files.archive`` for its JSON and its import)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chat.formats import archive_fields
from chat.formats.archive_file import (
    ARCHIVE_FORMAT,
    ARCHIVE_VERSION,
    ArchiveArtifact,
    ArchiveCheckpoint,
    ArchiveDecision,
    ArchiveEvent,
    ArchiveGoal,
    ArchiveGoalCheckpoint,
    ArchiveMessage,
    ArchiveRevision,
    ArchiveSnapshot,
    ArchiveState,
    SessionArchive,
    SnapshotState,
    StateCheckpoint,
    StateSession,
)
from chat.formats.file_checks import within_ranges
from chat.models import Artifact, Checkpoint, ContextEvent, Decision, Goal, Message, Snapshot
from chat.models import Session as ChatSession
from chat.services.files.export import session_file_build


class _Numbers:
    """Database ids as the archive's 1, 2, … in creation order; ids not among the rows (a snapshot's goal
    that was deleted since) get the next numbers, in the order they are first met."""

    def __init__(self, ids: Iterable[int]) -> None:
        self.known = {db_id: number for number, db_id in enumerate(ids, start=1)}

    def get(self, db_id: int) -> int | None:
        return self.known.get(db_id)

    def always(self, db_id: int) -> int:
        return self.known.setdefault(db_id, len(self.known) + 1)


def _state_within_ranges(state: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's stored state with the numbers of its session and checkpoints within their ranges, as the
    archive's own rows are (``Fields.values``): a snapshot an older release imported may hold any."""
    return {
        **state,
        "session": within_ranges(StateSession, state["session"]),
        "checkpoints": [within_ranges(StateCheckpoint, cp) for cp in state["checkpoints"]],
    }


def session_archive_build(*, session: ChatSession) -> SessionArchive:
    """Everything of the session, its ids the archive's (see ``chat.formats.archive_file``)."""
    file = session_file_build(session=session)
    session_id = file.session_id or str(session.id)
    messages = list(Message.objects.filter(session=session).order_by("position"))
    positions = {m.id: m.position for m in messages}
    checkpoints = list(Checkpoint.objects.filter(session=session).order_by("id").prefetch_related("revisions"))
    goals = list(Goal.objects.filter(session=session).order_by("id").prefetch_related("checkpoints"))
    decisions = list(Decision.objects.filter(session=session).order_by("id"))
    artifacts = list(Artifact.objects.filter(session=session).order_by("id"))
    snapshots = list(Snapshot.objects.filter(session=session).order_by("id"))
    events = list(ContextEvent.objects.filter(session=session).order_by("id"))
    cps = _Numbers(cp.id for cp in checkpoints)
    goal_numbers = _Numbers(g.id for g in goals)
    decision_numbers = _Numbers(d.id for d in decisions)
    artifact_numbers = _Numbers(a.id for a in artifacts)
    snapshot_numbers = _Numbers(s.id for s in snapshots)

    def local(numbers: _Numbers, db_id: int | None) -> int | None:
        return None if db_id is None else numbers.get(db_id)

    return SessionArchive(
        format=ARCHIVE_FORMAT,
        version=ARCHIVE_VERSION,
        session=file,
        state=ArchiveState(**archive_fields.STATE.values(session)),
        messages=[
            ArchiveMessage(
                **archive_fields.MESSAGE.values(m),
                compressed_into=local(cps, m.compressed_into_id),
                version_of=positions.get(m.version_of_id) if m.version_of_id else None,
            )
            for m in messages
        ],
        checkpoints=[
            ArchiveCheckpoint(
                **archive_fields.CHECKPOINT.values(cp),
                id=cps.always(cp.id),
                merged_into=local(cps, cp.merged_into_id),
                revisions=[
                    ArchiveRevision(**archive_fields.REVISION.values(r))
                    for r in sorted(cp.revisions.all(), key=lambda r: r.id)
                ],
            )
            for cp in checkpoints
        ],
        goals=[
            ArchiveGoal(
                **archive_fields.GOAL.values(g),
                id=goal_numbers.always(g.id),
                checkpoints=[
                    ArchiveGoalCheckpoint(**archive_fields.GOAL_CHECKPOINT.values(c))
                    for c in sorted(g.checkpoints.all(), key=lambda c: c.id)
                ],
            )
            for g in goals
        ],
        decisions=[
            ArchiveDecision(
                **archive_fields.DECISION.values(d),
                id=decision_numbers.always(d.id),
                goal=local(goal_numbers, d.goal_id),
            )
            for d in decisions
        ],
        artifacts=[
            ArchiveArtifact(
                **archive_fields.ARTIFACT.values(a),
                id=artifact_numbers.always(a.id),
                goal=local(goal_numbers, a.goal_id),
            )
            for a in artifacts
        ],
        snapshots=[
            ArchiveSnapshot(
                **archive_fields.SNAPSHOT.values(s),
                id=snapshot_numbers.always(s.id),
                state=SnapshotState.model_validate(
                    _state_within_ranges(
                        archive_fields.remap_state(
                            s.state,
                            session_id=session_id,
                            message=positions.__getitem__,
                            checkpoint=cps.always,
                            goal=goal_numbers.always,
                            decision=decision_numbers.always,
                            artifact=artifact_numbers.always,
                        )
                    )
                ),
            )
            for s in snapshots
        ],
        events=[
            ArchiveEvent(
                **archive_fields.EVENT.values(e),
                payload=archive_fields.remap_payload(e.payload, checkpoint=cps.get, snapshot=snapshot_numbers.get),
            )
            for e in events
        ],
    )
