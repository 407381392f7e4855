"""How an archive's entries stand to the database's rows, for the archive's export
(``chat.services.files.archive_export``) and its import (``chat.services.files.archive``) alike: the fields each
entry copies as they are, and the ids inside a snapshot's state and an event's payload, changed from the one
numbering to the other."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from pydantic import BaseModel

from chat.formats.archive_file import (
    CHECKPOINT_KEYS,
    CHECKPOINT_LIST_KEYS,
    SNAPSHOT_KEYS,
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
)
from chat.formats.file_checks import within_ranges

# A database id as the archive's, or back; None for an id with no counterpart.
Renumbering = Callable[[int], int | None]


class Fields:
    """The fields of an archive entry that its database row holds under the same name and with the same value:
    all of ``entry``'s but the ``mapped`` ones (its id in the archive, its references to other entries, which
    the database holds as its own ids, and the entries inside it), which the export and the import write."""

    def __init__(self, entry: type[BaseModel], *mapped: str) -> None:
        if unknown := set(mapped) - entry.model_fields.keys():
            raise ValueError(f"{entry.__name__} has no field {', '.join(sorted(unknown))}")
        self.entry = entry
        self.names = tuple(name for name in entry.model_fields if name not in mapped)

    def values(self, source: object, *, without: Collection[str] = ()) -> dict[str, Any]:
        """The fields' values in ``source``: a database row (for the export) or an archive entry (the import), each
        number within its field's range (``within_ranges``)."""
        return within_ranges(self.entry, {name: getattr(source, name) for name in self.names if name not in without})


STATE = Fields(ArchiveState)
MESSAGE = Fields(ArchiveMessage, "compressed_into", "version_of")
CHECKPOINT = Fields(ArchiveCheckpoint, "id", "merged_into", "revisions")
REVISION = Fields(ArchiveRevision)
GOAL = Fields(ArchiveGoal, "id", "checkpoints")
GOAL_CHECKPOINT = Fields(ArchiveGoalCheckpoint)
DECISION = Fields(ArchiveDecision, "id", "goal")
ARTIFACT = Fields(ArchiveArtifact, "id", "goal")
SNAPSHOT = Fields(ArchiveSnapshot, "id", "state")
EVENT = Fields(ArchiveEvent, "payload")


def remap_state(
    state: dict[str, Any],
    *,
    session_id: str,
    message: Callable[[int], int],
    checkpoint: Callable[[int], int],
    goal: Callable[[int], int],
    decision: Callable[[int], int],
    artifact: Callable[[int], int],
) -> dict[str, Any]:
    """A snapshot's state with every id changed by the mappings; the rest as it was."""

    def maybe(mapping: Callable[[int], int], value: int | None) -> int | None:
        return None if value is None else mapping(value)

    def goal_of(row: dict[str, Any]) -> dict[str, Any]:
        return {"goal": maybe(goal, row["goal"])} if "goal" in row else {}

    messages = state["messages"]
    return {
        **state,
        "session": {**state["session"], "id": session_id},
        "messages": {
            **messages,
            "states": [[message(m), maybe(checkpoint, cp), excluded] for m, cp, excluded in messages["states"]],
        },
        "checkpoints": [
            {**cp, "id": checkpoint(cp["id"]), "merged_into": maybe(checkpoint, cp["merged_into"])}
            for cp in state["checkpoints"]
        ],
        "goals": [{**g, "id": goal(g["id"])} for g in state["goals"]],
        "decisions": [{**d, "id": decision(d["id"]), **goal_of(d)} for d in state["decisions"]],
        "artifacts": [{**a, "id": artifact(a["id"]), **goal_of(a)} for a in state["artifacts"]],
    }


def remap_payload(payload: dict[str, Any], *, checkpoint: Renumbering, snapshot: Renumbering) -> dict[str, Any]:
    """An event's payload with its checkpoint and snapshot ids changed; an id with no counterpart is null."""
    changed = dict(payload)
    for key in CHECKPOINT_KEYS:
        if isinstance(changed.get(key), int):
            changed[key] = checkpoint(changed[key])
    for key in CHECKPOINT_LIST_KEYS:
        if isinstance(changed.get(key), list):
            changed[key] = [checkpoint(value) if isinstance(value, int) else value for value in changed[key]]
    for key in SNAPSHOT_KEYS:
        if isinstance(changed.get(key), int):
            changed[key] = snapshot(changed[key])
    return changed
