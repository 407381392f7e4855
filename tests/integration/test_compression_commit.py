from __future__ import annotations

from functools import partial

import pytest

from chat.models import Checkpoint, CheckpointRevision, ContextEvent, Message
from chat.selectors.context import active_checkpoints, session_budget
from chat.selectors.snapshot_state import session_state
from chat.services.checkpoints import (
    AgedSummary,
    CheckpointDraft,
    CompressionConflict,
    MergedSummary,
    compression_commit,
)
from chat.services.events import event_record
from chat.services.messages import message_create
from engine.core.aging import Level
from engine.core.retention import Fact
from tests.factories import converse

pytestmark = pytest.mark.django_db


# Short questions, long numbered answers: the answers.
long_answers = partial(converse, question="Question {index}", answer=lambda index: f"A long answer {index}. " * 20)


def test_a_compression_replaces_messages_with_a_checkpoint(chat_session):
    replies = long_answers(chat_session, 3)
    before = session_budget(session=chat_session)
    checkpoint = compression_commit(
        session=chat_session,
        message_ids=[m.id for m in replies[:2]],
        draft=CheckpointDraft(
            summary="Two answers.",
            key_decisions=("Use JWT",),
            files_modified=("a.py",),
            facts=(Fact("decision", "Use JWT"), Fact("path", "a.py"), Fact("number", "30 s"), Fact("path", "b.py")),
        ),
    )
    after = session_budget(session=chat_session)

    assert checkpoint.number == 1
    assert checkpoint.level == Level.RECENT
    assert checkpoint.range_label == "Messages 2-4"
    assert checkpoint.original_tokens == replies[0].tokens + replies[1].tokens
    assert (checkpoint.key_decisions, checkpoint.files_modified) == (["Use JWT"], ["a.py"])
    assert list(Message.objects.filter(compressed_into=checkpoint).values_list("id", flat=True)) == [
        replies[0].id,
        replies[1].id,
    ]
    assert after.active_tokens == before.active_tokens - checkpoint.original_tokens
    assert after.checkpoint_tokens == checkpoint.current_tokens
    chat_session.refresh_from_db()
    assert chat_session.compression_count == 1
    # Two of the four facts are in the checkpoint (its structured fields): retention 0.5.
    assert checkpoint.retention == 0.5
    assert chat_session.reliability_score == pytest.approx(0.30 * 0.85 * 0.5)
    assert [r.reason for r in checkpoint.revisions.all()] == ["created"]
    compressed = ContextEvent.objects.get(session=chat_session, type="compressed")
    assert compressed.payload["tokens_before"] == before.used
    assert compressed.payload["tokens_after"] == after.used
    assert compressed.payload["available_after"] == after.available
    assert ContextEvent.objects.filter(type="checkpoint-created").count() == 1
    # The full history is untouched.
    assert Message.objects.get(pk=replies[0].pk).content == "A long answer 0. " * 20


def test_aging_and_merging_write_revisions_and_events(chat_session):
    replies = long_answers(chat_session, 4)
    first = compression_commit(session=chat_session, message_ids=[replies[0].id], draft=CheckpointDraft(summary="one"))
    second = compression_commit(
        session=chat_session,
        message_ids=[replies[1].id],
        draft=CheckpointDraft(summary="two"),
        aged=[AgedSummary(first.id, Level.OLD, "1")],
    )
    third = compression_commit(
        session=chat_session,
        message_ids=[replies[2].id],
        draft=CheckpointDraft(summary="three"),
        aged=[AgedSummary(second.id, Level.OLD, "2")],
        merged=MergedSummary((first.id,), "ultra"),
    )
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.level, first.summary, first.compression_count) == (Level.ULTRA, "ultra", 3)
    assert [r.level for r in first.revisions.all()] == [Level.RECENT, Level.OLD, Level.ULTRA]
    assert [r.reason for r in first.revisions.all()] == ["created", "aged", "merged"]
    assert second.level == Level.OLD
    assert [cp.id for cp in active_checkpoints(session=chat_session)] == [first.id, second.id, third.id]
    aged_events = ContextEvent.objects.filter(type="checkpoint-aged").order_by("id")
    assert [(e.payload["from_level"], e.payload["to_level"]) for e in aged_events[:1]] == [(3, 2)]
    merge_event = aged_events.last()
    assert merge_event is not None
    assert merge_event.payload["merged"] == [first.id]


def test_merging_several_checkpoints_keeps_one_in_the_context(chat_session):
    replies = long_answers(chat_session, 3)
    a = compression_commit(session=chat_session, message_ids=[replies[0].id], draft=CheckpointDraft(summary="a"))
    b = compression_commit(session=chat_session, message_ids=[replies[1].id], draft=CheckpointDraft(summary="b"))
    compression_commit(
        session=chat_session,
        message_ids=[replies[2].id],
        draft=CheckpointDraft(summary="c"),
        merged=MergedSummary((a.id, b.id), "a and b"),
    )
    a.refresh_from_db()
    b.refresh_from_db()
    assert b.merged_into_id == a.id
    assert a.range_label == "Messages 2-4"
    assert a.original_tokens == replies[0].tokens + replies[1].tokens
    assert active_checkpoints(session=chat_session).count() == 2


def state_of(session):
    return session_state(session=session), list(ContextEvent.objects.values_list("type", flat=True))


@pytest.mark.parametrize("case", ["user message", "already compressed", "other session", "gone checkpoint"])
def test_conflicts_change_nothing(chat_session, user, case):
    from chat.services.sessions import session_create

    replies = long_answers(chat_session, 2)
    done = compression_commit(session=chat_session, message_ids=[replies[0].id], draft=CheckpointDraft(summary="x"))
    before = state_of(chat_session)
    other = session_create(owner=user, model="m", context_size=8192)
    foreign = message_create(session=other, role="assistant", content="elsewhere")
    ids, aged = {
        "user message": ([replies[1].id - 1], []),
        "already compressed": ([replies[0].id], []),
        "other session": ([foreign.id], []),
        "gone checkpoint": ([replies[1].id], [AgedSummary(done.id + 999, Level.OLD, "?")]),
    }[case]
    with pytest.raises(CompressionConflict):
        compression_commit(session=chat_session, message_ids=ids, draft=CheckpointDraft(summary="y"), aged=aged)
    assert state_of(chat_session) == before


def test_a_failure_inside_the_transaction_leaves_everything_as_it_was(chat_session, monkeypatch):
    replies = long_answers(chat_session, 3)
    first = compression_commit(session=chat_session, message_ids=[replies[0].id], draft=CheckpointDraft(summary="a"))
    before = state_of(chat_session)
    revisions = CheckpointRevision.objects.count()

    def fail_on_compressed(**kwargs):
        if kwargs["type"] == "compressed":
            raise RuntimeError("database went away")
        return event_record(**kwargs)

    monkeypatch.setattr("chat.services.checkpoints.event_record", fail_on_compressed)
    with pytest.raises(RuntimeError, match="database went away"):
        compression_commit(
            session=chat_session,
            message_ids=[replies[1].id],
            draft=CheckpointDraft(summary="b"),
            aged=[AgedSummary(first.id, Level.OLD, "a, aged")],
        )
    assert state_of(chat_session) == before
    assert CheckpointRevision.objects.count() == revisions
    assert Checkpoint.objects.count() == 1
