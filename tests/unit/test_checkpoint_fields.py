"""Each field of a checkpoint is declared once as kept by a snapshot or not, and why (chat.models.checkpoint_fields):
a field added to Checkpoint fails here until it is put in one list, and the archive's entries follow the model."""

from __future__ import annotations

from django.db import models

from chat.formats.archive_file import ArchiveCheckpoint, ArchiveRevision, StateCheckpoint
from chat.models import (
    CHECKPOINT_FIELDS_ADDED_LATER,
    CHECKPOINT_NOT_IN_STATE,
    CHECKPOINT_RANGE_FIELDS,
    CHECKPOINT_STATE_FIELDS,
    Checkpoint,
    CheckpointRevision,
)


def _fields(model: type[models.Model]) -> set[str]:
    return {field.name for field in model._meta.concrete_fields}


def test_every_field_of_a_checkpoint_is_kept_by_a_snapshot_or_said_why_not():
    kept, left = set(CHECKPOINT_STATE_FIELDS), set(CHECKPOINT_NOT_IN_STATE)
    assert len(kept) == len(CHECKPOINT_STATE_FIELDS), "a field is listed twice"
    unclassified = _fields(Checkpoint) - kept - left
    assert not unclassified, (
        f"Checkpoint's {sorted(unclassified)}: put each in chat/models/checkpoint_fields.py, in "
        "CHECKPOINT_STATE_FIELDS (a snapshot keeps it, a restore sets it back, a branch copies it) "
        "or in CHECKPOINT_NOT_IN_STATE with the reason"
    )
    assert not kept & left, f"both kept and not: {sorted(kept & left)}"
    assert not (kept | left) - _fields(Checkpoint), "a list names a field Checkpoint no longer has"
    assert all(reason.strip() for reason in CHECKPOINT_NOT_IN_STATE.values())


def test_the_special_cases_are_fields_a_snapshot_keeps():
    assert set(CHECKPOINT_RANGE_FIELDS) <= set(CHECKPOINT_STATE_FIELDS)
    assert set(CHECKPOINT_FIELDS_ADDED_LATER) <= set(CHECKPOINT_STATE_FIELDS)


def test_an_archived_snapshot_state_holds_what_a_snapshot_keeps():
    # range_label: what snapshots taken before ranges were integers hold instead of the range's fields.
    assert set(StateCheckpoint.model_fields) == {"id", "range_label", *CHECKPOINT_STATE_FIELDS}


def test_the_archive_holds_every_field_of_a_checkpoint_and_of_its_revisions():
    # The session is the archive's own; the revisions are entries inside their checkpoint's.
    assert set(ArchiveCheckpoint.model_fields) == _fields(Checkpoint) - {"session"} | {"revisions"}
    assert set(ArchiveRevision.model_fields) == _fields(CheckpointRevision) - {"id", "checkpoint"}
