"""Snapshot System"""

from __future__ import annotations

import pytest
from django.db import transaction

from chat.models import Checkpoint, ContextEvent, ImmutableError, Message, Session, Snapshot
from chat.selectors.context import session_budget, session_snapshots
from chat.services.compression import compression_run
from chat.services.goals import decision_record, goal_create
from chat.services.messages import message_create
from chat.services.sessions import session_delete
from chat.services.snapshots import SnapshotError, snapshot_create, snapshot_restore
from tests.factories import converse, event_types, prompt, small_session, until_due

pytestmark = pytest.mark.django_db


def test_snapshot_structure(due_session, gateway, fake_ollama):
    """Spec: "interface ContextSnapshot" with "sessionId", "timestamp", "context: ConversationContext; // Full state",
    "tokenCount", "messageCount", "checkpointCount", "metadata: { model: string; tier: ContextTier; ... }"."""
    fake_ollama.behaviour.canned_reply = "Recap."
    compression_run(session_id=due_session.pk, gateway=gateway)
    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="before a big change")
    assert snapshot.id is not None
    assert snapshot.session_id == due_session.pk
    assert snapshot.created_at is not None
    assert snapshot.token_count == session_budget(session=due_session).used
    assert snapshot.message_count == Message.objects.filter(session=due_session).count()
    assert snapshot.checkpoint_count == 1
    assert (snapshot.model, snapshot.tier) == (due_session.model, 3)
    state = snapshot.state
    assert state["session"]["system_prompt"] == due_session.system_prompt
    assert [cp["summary"] for cp in state["checkpoints"]] == ["Recap."]


def test_snapshot_never_changes_after_creation(chat_session):
    """Spec: "Never changes after creation"."""
    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL)
    snapshot.reason = "edited"
    with pytest.raises(ImmutableError):
        snapshot.save()
    snapshot.refresh_from_db()
    assert snapshot.reason == ""


def test_create_and_restore(due_session, gateway, fake_ollama):
    """Spec: "const snapshot = await contextManager.createSnapshot(); // Saves full conversation state" and
    "await contextManager.restoreSnapshot(snapshotId); // Restores conversation to previous state"."""
    fake_ollama.behaviour.canned_reply = "Recap."
    goal = goal_create(session=due_session, description="Ship secure logins")
    decision_record(session=due_session, description="Argon2 only", locked=True, goal=goal)
    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="known good")
    due_session.refresh_from_db()
    before = (prompt(due_session), session_budget(session=due_session), due_session.compression_count)

    assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
    converse(due_session, 2, start=500)
    goal_create(session=due_session, description="Something else")
    assert prompt(due_session) != before[0]

    snapshot_restore(snapshot=snapshot)
    due_session.refresh_from_db()
    assert (prompt(due_session), session_budget(session=due_session), due_session.compression_count) == before
    assert not Checkpoint.objects.filter(session=due_session, retired=False).exists()
    # The messages written since stay in the full history, out of the active context.
    later = Message.objects.filter(session=due_session, content__contains="number 50")
    assert later.count() == 2
    assert all(m.excluded_from_context for m in later)
    assert event_types(due_session)[-1] == "snapshot-restored"


def test_list_snapshots(chat_session):
    """Spec: "const snapshots = await contextManager.listSnapshots(); // Returns all available snapshots"."""
    made = [snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL, reason=f"s{i}") for i in range(3)]
    listed = list(session_snapshots(session=chat_session))
    assert [s.id for s in listed] == [s.id for s in reversed(made)]


def test_snapshot_is_not_part_of_active_context(chat_session):
    """Spec: "Not part of active context" and "Used for recovery and rollback"."""
    message_create(session=chat_session, role="user", content="Hello there")
    before = prompt(chat_session)
    snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL, reason="a marker text only snapshots hold")
    assert prompt(chat_session) == before
    assert "a marker text only snapshots hold" not in str(prompt(chat_session))


def test_restore_can_itself_be_undone(due_session, gateway, fake_ollama):
    """Spec: "Use snapshots for experimentation" and "Restore snapshots if conversation goes off track"."""
    fake_ollama.behaviour.canned_reply = "Recap."
    first = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL)
    compression_run(session_id=due_session.pk, gateway=gateway)
    until_due(due_session, start=300)
    compressed = prompt(due_session)
    undo = snapshot_restore(snapshot=first)
    assert undo is not None
    assert prompt(due_session) != compressed
    snapshot_restore(snapshot=undo)
    assert prompt(due_session) == compressed
    assert ContextEvent.objects.filter(session=due_session, type="snapshot-restored").count() == 2


def _captured(session):
    """What a restore must bring back: the next prompt, the budget and the compression count."""
    session.refresh_from_db()
    return prompt(session), session_budget(session=session), session.compression_count


def test_every_snapshot_restores_after_others_are_deleted(due_session, gateway, fake_ollama):
    """Spec: a snapshot is the "Full conversation state", "Used for recovery and rollback": deleting
    one (as the admin may) leaves every other restorable to exactly what it captured."""
    fake_ollama.behaviour.canned_reply = "Recap."
    taken = []
    for round_ in range(4):
        snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason=f"round {round_}")
        taken.append((snapshot, _captured(due_session)))
        assert compression_run(session_id=due_session.pk, gateway=gateway, force=True).status == "compressed"
        converse(due_session, 2, start=100 * (round_ + 1))
    # The middle ones go: those later snapshots were once written as deltas on.
    Snapshot.objects.filter(pk__in=[taken[1][0].pk, taken[2][0].pk]).delete()
    for snapshot, captured in [taken[3], taken[0], taken[3]]:
        snapshot_restore(snapshot=snapshot)
        assert _captured(due_session) == captured
    # The undo snapshots taken by those restores restore too, with their bases deleted.
    undo = Snapshot.objects.filter(session=due_session, reason__startswith="Before restoring").order_by("id")
    first_undo = undo.first()
    assert first_undo is not None
    Snapshot.objects.filter(pk=taken[3][0].pk).delete()
    snapshot_restore(snapshot=first_undo)
    restored = _captured(due_session)
    snapshot_restore(snapshot=taken[0][0])
    assert _captured(due_session) == taken[0][1]
    assert restored != taken[0][1]


def test_a_snapshot_cannot_be_changed_through_any_path(chat_session):
    """Spec: "Never changes after creation": neither a model save nor a queryset update or
    bulk_update rewrites one."""
    message_create(session=chat_session, role="user", content="Hello there")
    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL, reason="kept")
    stored = Snapshot.objects.values_list("reason", "state").get(pk=snapshot.pk)
    snapshot.reason = "edited"
    snapshot.state = {}
    with pytest.raises(ImmutableError):
        snapshot.save()
    with pytest.raises(ImmutableError):
        snapshot.save(update_fields=["reason"])
    with pytest.raises(ImmutableError):
        Snapshot.objects.filter(pk=snapshot.pk).update(reason="edited")
    with pytest.raises(ImmutableError), transaction.atomic():  # bulk_update's own atomic joins the test's
        Snapshot.objects.bulk_update([snapshot], ["reason"])
    assert Snapshot.objects.values_list("reason", "state").get(pk=snapshot.pk) == stored


def test_deleting_a_session_deletes_its_snapshots(chat_session):
    snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL)
    session_delete(session=chat_session)
    assert not Session.objects.filter(pk=chat_session.pk).exists()
    assert not Snapshot.objects.filter(session_id=chat_session.pk).exists()


def test_snapshot_config_enabled_false_means_no_snapshot_of_any_kind(user, gateway, fake_ollama):
    """Spec: "interface SnapshotConfig { enabled: boolean; autoCreate: boolean; ... }": ``enabled``
    switches snapshots off, ``autoCreate`` only the automatic ones. Off, neither a compression nor
    "Snapshot now" takes one, and a restore of an earlier snapshot takes no undo snapshot and says so."""
    from chat.services.session_settings import session_set_context_settings

    fake_ollama.behaviour.canned_reply = "Recap."
    session = small_session(user, compression={"summary_max_tokens": 128})
    earlier = snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason="while on")
    captured = _captured(session)
    session_set_context_settings(session=session, settings={"snapshots": {"enabled": False}})
    until_due(session)
    assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
    with pytest.raises(SnapshotError, match="snapshots are off in this session's settings"):
        snapshot_create(session=session, kind=Snapshot.Kind.MANUAL)
    assert list(Snapshot.objects.filter(session=session)) == [earlier]

    assert snapshot_restore(snapshot=earlier) is None
    assert _captured(session) == captured
    assert list(Snapshot.objects.filter(session=session)) == [earlier]
    restored = ContextEvent.objects.filter(session=session, type="snapshot-restored").get()
    assert restored.payload["undo_snapshot"] is None
    assert "auto-snapshot-created" not in event_types(session)
