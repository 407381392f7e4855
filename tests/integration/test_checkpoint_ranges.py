"""A checkpoint's range is stored as integers and joined as integers: a carried-over checkpoint
that a rollover or a merge takes over keeps its origin whole (the text ranges of before were
split at "-", which made "Carried over from “Plan A-B (draft)”" rolled over with messages 2-4
into "Carried over from “Plan A-4")."""

from __future__ import annotations

import pytest

from chat.models import Checkpoint, ContextEvent, Snapshot
from chat.services.checkpoints import CheckpointDraft, MergedSummary, compression_commit, rollover_commit
from chat.services.snapshots import snapshot_create, snapshot_restore
from engine.core.aging import Level
from engine.core.ranges import MessageRange, carried_over
from tests.factories import converse

pytestmark = pytest.mark.django_db

TITLE = "Plan A-B (draft)"
CARRIED = "Carried over from “Plan A-B (draft)”"


def carried_checkpoint(session):
    return Checkpoint.objects.create(
        session=session,
        number=0,
        level=Level.ULTRA,
        origin=carried_over(TITLE).origin,
        summary="What the first session said.",
        original_tokens=500,
        current_tokens=20,
    )


def test_a_rollover_of_a_carried_over_checkpoint_keeps_its_origin_whole(chat_session):
    carried = carried_checkpoint(chat_session)
    assert carried.range_label == CARRIED
    replies = converse(chat_session, 3)

    carrier = rollover_commit(
        session=chat_session,
        checkpoint_ids=[carried.id],
        message_ids=[replies[0].id, replies[1].id],
        draft=CheckpointDraft(summary="Both sessions so far."),
    )

    carried.refresh_from_db()
    assert carrier.pk == carried.pk
    assert carried.message_range == MessageRange(2, 4, CARRIED)
    assert carried.range_label == f"{CARRIED}, then messages 2-4"
    event = ContextEvent.objects.get(session=chat_session, type="checkpoint-aged")
    assert event.payload["range"] == f"{CARRIED}, then messages 2-4"


def test_a_merge_of_a_carried_over_checkpoint_keeps_its_origin_whole(chat_session):
    carried = carried_checkpoint(chat_session)
    replies = converse(chat_session, 3)
    first = compression_commit(session=chat_session, message_ids=[replies[0].id], draft=CheckpointDraft(summary="a"))
    assert first.range_label == "Message 2"

    newest = compression_commit(
        session=chat_session,
        message_ids=[replies[1].id, replies[2].id],
        draft=CheckpointDraft(summary="b"),
        merged=MergedSummary((carried.id, first.id), "carried and a"),
    )

    carried.refresh_from_db()
    assert (carried.first_position, carried.last_position, carried.origin) == (2, 2, CARRIED)
    assert carried.range_label == f"{CARRIED}, then message 2"
    assert newest.range_label == "Messages 4-6"


def test_a_restored_snapshot_gives_back_the_range(chat_session):
    carried = carried_checkpoint(chat_session)
    replies = converse(chat_session, 2)
    rollover_commit(
        session=chat_session,
        checkpoint_ids=[carried.id],
        message_ids=[replies[0].id],
        draft=CheckpointDraft(summary="Both sessions so far."),
    )
    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL, reason="before")
    Checkpoint.objects.filter(pk=carried.pk).update(first_position=None, last_position=None, origin="changed")

    snapshot_restore(snapshot=snapshot)

    carried.refresh_from_db()
    assert carried.message_range == MessageRange(2, 2, CARRIED)
