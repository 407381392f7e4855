from __future__ import annotations

import pytest

from chat.models import Message
from chat.services import message_create
from contextmgr.models import Checkpoint, ContextEvent, Decision, Snapshot
from contextmgr.selectors import session_budget
from contextmgr.services.compression import compression_run
from contextmgr.services.goals import artifact_record, decision_record, decision_update, goal_create
from contextmgr.services.snapshots import SnapshotError, snapshot_create, snapshot_restore
from tests.factories import prompt

pytestmark = pytest.mark.django_db


def test_snapshot_then_changes_then_restore_gives_the_same_prompt(due_session, gateway, fake_ollama):
    goal = goal_create(session=due_session, description="Ship secure logins", priority="high")
    decision = decision_record(session=due_session, description="Argon2 only", locked=True, goal=goal)
    fake_ollama.behaviour.canned_reply = "First summary."
    compression_run(session_id=due_session.pk, gateway=gateway)
    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="known good")
    due_session.refresh_from_db()
    before, budget_before, count_before = (
        prompt(due_session),
        session_budget(session=due_session),
        due_session.compression_count,
    )

    for index in range(3):
        message_create(session=due_session, role="user", content=f"Later question {index}")
        message_create(session=due_session, role="assistant", content="A later answer. " * 30)
    fake_ollama.behaviour.canned_reply = "Second summary."
    assert compression_run(session_id=due_session.pk, gateway=gateway, force=True).status == "compressed"
    goal_create(session=due_session, description="Something else entirely")
    decision_update(decision=decision, locked=False)
    artifact_record(session=due_session, path="src/new.ts", action="created")
    changed = prompt(due_session)
    assert changed != before

    undo = snapshot_restore(snapshot=snapshot)
    due_session.refresh_from_db()
    assert prompt(due_session) == before
    assert session_budget(session=due_session) == budget_before
    assert due_session.compression_count == count_before
    later = Message.objects.filter(session=due_session, content__startswith="Later question")
    assert later.count() == 3
    assert all(m.excluded_from_context for m in later)
    assert Checkpoint.objects.filter(session=due_session, retired=True).count() == 1
    assert Decision.objects.get(pk=decision.pk).locked
    restored = ContextEvent.objects.get(session=due_session, type="snapshot-restored")
    assert restored.payload == {
        "snapshot": snapshot.id,
        "undo_snapshot": undo.id,
        "messages_excluded": 6,
        "checkpoints_retired": 1,
    }

    # A restore can itself be undone.
    snapshot_restore(snapshot=undo)
    due_session.refresh_from_db()
    assert prompt(due_session) == changed
    assert not Message.objects.filter(session=due_session, excluded_from_context=True).exists()


def test_restoring_twice_is_stable(due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = "A summary."
    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL)
    before = prompt(due_session)
    compression_run(session_id=due_session.pk, gateway=gateway)
    snapshot_restore(snapshot=snapshot)
    snapshot_restore(snapshot=snapshot)
    assert prompt(due_session) == before


def test_a_broken_snapshot_changes_nothing_and_says_why(due_session):
    broken = Snapshot.objects.create(
        session=due_session,
        kind=Snapshot.Kind.MANUAL,
        state={"session": {}},
        token_count=0,
        message_count=0,
        checkpoint_count=0,
        model="m",
        tier=1,
    )
    before = prompt(due_session)
    with pytest.raises(SnapshotError, match=f"snapshot {broken.id} could not be restored"):
        snapshot_restore(snapshot=broken)
    assert prompt(due_session) == before
    error = ContextEvent.objects.get(session=due_session, type="snapshot-error")
    assert error.payload["snapshot"] == broken.id
    assert Snapshot.objects.filter(session=due_session).count() == 1


def test_a_restore_waits_for_no_compression(due_session):
    from django.utils import timezone

    from chat.models import Session

    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL)
    Session.objects.filter(pk=due_session.pk).update(compression_started_at=timezone.now())
    with pytest.raises(SnapshotError, match="a compression of this session is running"):
        snapshot_restore(snapshot=snapshot)
    assert ContextEvent.objects.filter(session=due_session, type="snapshot-error").count() == 1
    assert not ContextEvent.objects.filter(session=due_session, type="snapshot-restored").exists()
