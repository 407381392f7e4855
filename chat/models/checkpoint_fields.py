"""Which of a checkpoint's fields each copy of it holds, declared once beside the model (issue 48, item 4).

A snapshot's state keeps the fields of ``CHECKPOINT_STATE_FIELDS`` (``chat.selectors.snapshot_state``); a restore
sets the same fields back (``chat.services.snapshots``) and a branch copies the same fields into its own
checkpoints (``chat.services.branches``), from a snapshot's state or from the session's now. The archive keeps
every field (``chat.formats.archive_file.ArchiveCheckpoint``, and its ``StateCheckpoint`` for a snapshot's state).
``tests/unit/test_checkpoint_fields.py`` fails when a field of ``Checkpoint`` is in none of these lists, or when
the archive's entries leave one out.
"""

from __future__ import annotations

from django.db import models

from chat.models.checkpoints import Checkpoint

# What a snapshot keeps of each checkpoint beside its id: all that its part of the active context is rebuilt
# from. In the order a snapshot's state has always written them. A restore and a branch set all of them; they
# differ only where a field's value cannot be copied as it is: the range of a snapshot taken before ranges were
# integers (CHECKPOINT_RANGE_FIELDS), the facts of one taken before the ledger (CHECKPOINT_FIELDS_ADDED_LATER)
# and merged_into, which a branch points at its own copy of the ultra checkpoint, made after the checkpoint.
CHECKPOINT_STATE_FIELDS: tuple[str, ...] = (
    "number",
    "level",
    "first_position",
    "last_position",
    "origin",
    "summary",
    "strategy",
    "original_tokens",
    "current_tokens",
    "compression_count",
    "key_decisions",
    "files_modified",
    "next_steps",
    "facts",
    "ledger",
    "retention",
    "merged_into",
    "retired",
)

# The fields no snapshot keeps, and why. The archive keeps them all but the session (the archive is the session's).
CHECKPOINT_NOT_IN_STATE: dict[str, str] = {
    "id": "the state keys each checkpoint by it: a restore finds the checkpoint by it, a branch's copy has its own",
    "session": "a snapshot is of its own session's checkpoints; a branch's copies are the branch's",
    "created_at": "when the row was made: a restore keeps the checkpoint's, a branch's copy is made with the branch",
    "compressed_at": "when it was last aged, for the timeline only: a restore keeps the checkpoint's, a branch's "
    "copy has none",
}

# Where a checkpoint's messages are (Checkpoint.message_range). A snapshot taken before ranges were integers
# holds a "range_label" instead, read back with engine.core.ranges.range_from_label.
CHECKPOINT_RANGE_FIELDS: tuple[str, ...] = ("first_position", "last_position", "origin")

# Fields a snapshot taken before the fact ledger does not hold: a restore keeps the checkpoint's, a branch's
# copy has none.
CHECKPOINT_FIELDS_ADDED_LATER: tuple[str, ...] = ("facts", "ledger")


def checkpoint_attname(name: str) -> str:
    """The attribute that holds the value of the field ``name``: ``merged_into_id`` for ``merged_into``."""
    field = Checkpoint._meta.get_field(name)
    assert isinstance(field, models.Field), f"{name} is not a field of Checkpoint's own"
    return field.attname
