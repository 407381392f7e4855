"""A snapshot keeps, a restore sets back and a branch copies each of CHECKPOINT_STATE_FIELDS
(chat.models.checkpoint_fields): the one list the three read (issue 48, item 4). No model is involved."""

from __future__ import annotations

from typing import Any

import pytest

from chat.models import CHECKPOINT_STATE_FIELDS, Checkpoint, Message, Snapshot, checkpoint_attname
from chat.services.sessions import session_branch
from chat.services.snapshots import snapshot_create, snapshot_restore
from tests.factories import converse

pytestmark = pytest.mark.django_db

# Two values of each field a snapshot keeps, neither the default (merged_into and the range: set by the test).
KEPT: dict[str, Any] = {
    "number": 1,
    "level": 2,
    "summary": "What the first messages said.",
    "strategy": Checkpoint.Strategy.TRUNCATE,
    "original_tokens": 900,
    "current_tokens": 120,
    "compression_count": 3,
    "key_decisions": ["Argon2 only"],
    "files_modified": ["src/login.py"],
    "next_steps": ["Write the tests"],
    "facts": [["number", "port 8080"]],
    "ledger": [["number", "port 8080"]],
    "retention": 0.75,
    "retired": False,
}
CHANGED: dict[str, Any] = {
    "number": 7,
    "level": 3,
    "summary": "Something else.",
    "strategy": Checkpoint.Strategy.SUMMARIZE,
    "original_tokens": 901,
    "current_tokens": 60,
    "compression_count": 4,
    "key_decisions": [],
    "files_modified": [],
    "next_steps": [],
    "facts": [],
    "ledger": [],
    "retention": None,
    "retired": True,
}


def state_of(checkpoint: Checkpoint) -> dict[str, Any]:
    checkpoint.refresh_from_db()
    return {name: getattr(checkpoint, checkpoint_attname(name)) for name in CHECKPOINT_STATE_FIELDS}


def test_a_snapshot_keeps_a_restore_sets_back_and_a_branch_copies_every_field_of_the_list(chat_session):
    replies = converse(chat_session, 3)
    assert set(KEPT) | {"first_position", "last_position", "origin", "merged_into"} == set(CHECKPOINT_STATE_FIELDS)
    ultra = Checkpoint.objects.create(
        session=chat_session, **{**KEPT, "number": 2, "level": 0, "first_position": 1, "last_position": 4}
    )
    checkpoint = Checkpoint.objects.create(
        session=chat_session, **KEPT, first_position=1, last_position=2, origin="And “Plans”", merged_into=ultra
    )
    Message.objects.filter(session=chat_session, position__lte=4).update(compressed_into=ultra)
    kept = state_of(checkpoint)

    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL, reason="every field")
    assert {"id": checkpoint.id, **kept} in snapshot.state["checkpoints"]

    Checkpoint.objects.filter(pk=checkpoint.pk).update(
        **CHANGED, first_position=3, last_position=4, origin="", merged_into=None
    )
    assert state_of(checkpoint) != kept
    snapshot_restore(snapshot=snapshot)
    assert state_of(checkpoint) == kept

    branch = session_branch(session=chat_session, at_message=replies[-1])
    copied = Checkpoint.objects.get(session=branch, number=KEPT["number"])
    # merged_into: the branch's own copy of the ultra checkpoint.
    assert state_of(copied) == {**kept, "merged_into": Checkpoint.objects.get(session=branch, number=2).id}
