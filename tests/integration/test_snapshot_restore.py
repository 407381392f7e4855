from __future__ import annotations

import importlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from chat.models import Checkpoint, ContextEvent, Decision, Goal, Message, Snapshot
from chat.selectors.context import session_budget
from chat.services.compression import compression_run
from chat.services.goals import artifact_record, decision_record, decision_update, goal_create, goal_update
from chat.services.messages import message_create
from chat.services.snapshots import SnapshotError, snapshot_create, snapshot_restore
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
    assert undo is not None
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


MIGRATION = importlib.import_module("contextmgr.migrations.0008_self_contained_snapshots")


def _historical_snapshots():
    """The Snapshot model as the migration sees it: no immutable queryset, so it can rewrite rows."""
    state = MigrationExecutor(connection).loader.project_state(("contextmgr", "0008_self_contained_snapshots"))
    return state.apps


def test_migration_0008_turns_a_chain_of_deltas_into_full_snapshots(due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = "A summary."
    taken = []
    for round_ in range(3):
        snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL)
        due_session.refresh_from_db()
        taken.append((snapshot, snapshot.state, prompt(due_session)))
        compression_run(session_id=due_session.pk, gateway=gateway, force=True)
        for index in range(2):
            message_create(session=due_session, role="user", content=f"Round {round_} question {index}")
    # Written as before 0008: each snapshot only what changed since the one before.
    apps = _historical_snapshots()
    Historical = apps.get_model("contextmgr", "Snapshot")
    previous: dict[int, list[object]] = {}
    for version, (snapshot, state, _) in enumerate(taken, start=1):
        rows = state["messages"]["states"]
        changed = [row for row in rows if previous.get(row[0]) != row]
        base = taken[version - 2][0].id if version > 1 else None
        last = state["messages"]["last_position"]
        old = {"base": base, "version": version, "last_position": last, "changed": changed}
        Historical.objects.filter(pk=snapshot.pk).update(state={**state, "messages": old})
        previous = {row[0]: row for row in rows}
    assert len(Snapshot.objects.get(pk=taken[2][0].pk).state["messages"]["changed"]) < len(previous)

    MIGRATION.chain_to_full(apps, None)
    for snapshot, state, _ in taken:
        assert Snapshot.objects.get(pk=snapshot.pk).state == state
    # Going back writes chains of one that hold the same states; forward again restores them.
    MIGRATION.full_to_chain(apps, None)
    assert Snapshot.objects.get(pk=taken[2][0].pk).state["messages"]["changed"] == taken[2][1]["messages"]["states"]
    MIGRATION.chain_to_full(apps, None)
    for snapshot, _, captured in [taken[1], taken[0], taken[2]]:
        snapshot_restore(snapshot=Snapshot.objects.get(pk=snapshot.pk))
        assert prompt(due_session) == captured


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(
        django_user_model.objects.create_superuser(username="root", password="pw-root-123", email="r@example.com")
    )
    return client


def test_the_admin_reviews_snapshots_and_a_deletion_breaks_no_other(admin_client, due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = "A summary."
    first = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="first")
    compression_run(session_id=due_session.pk, gateway=gateway, force=True)
    middle = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="middle")
    message_create(session=due_session, role="user", content="After the middle snapshot")
    last = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="last")
    due_session.refresh_from_db()
    captured = prompt(due_session)

    change = reverse("admin:chat_snapshot_change", args=[middle.pk])
    page = admin_client.get(change)
    assert page.status_code == 200
    assert b'name="reason"' not in page.content  # shown, not editable
    assert admin_client.post(change, {"reason": "edited"}).status_code == 403
    assert Snapshot.objects.get(pk=middle.pk).reason == "middle"

    delete = reverse("admin:chat_snapshot_delete", args=[middle.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not Snapshot.objects.filter(pk=middle.pk).exists()
    snapshot_restore(snapshot=first)
    snapshot_restore(snapshot=last)
    assert prompt(due_session) == captured


def test_a_restore_from_the_chat_page_answers_with_the_restored_state(due_session, gateway, fake_ollama, owner_client):
    """Issue 47, item 6: after restoring a snapshot taken before any compression, no message reads
    "compressed into checkpoint", the meter says nothing is compressed, and a line says what was restored;
    all in the answer to the page's request, swapped in without a reload."""
    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="before compressing")
    for index in range(3):
        message_create(session=due_session, role="user", content=f"Later question {index}")
        message_create(session=due_session, role="assistant", content="A later answer. " * 30)
    fake_ollama.behaviour.canned_reply = "A summary."
    assert compression_run(session_id=due_session.pk, gateway=gateway, force=True).status == "compressed"
    fake_ollama.behaviour.canned_reply = "Another summary."
    compression_run(session_id=due_session.pk, gateway=gateway, force=True)
    before = owner_client.get(reverse("chat:chat", args=[due_session.pk])).content.decode()
    assert "compressed into checkpoint #1" in before

    url = reverse("context:snapshot_restore", args=[snapshot.pk])
    answer = owner_client.post(url, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    html = answer.content.decode()
    assert "compressed into checkpoint" not in html
    assert "Full context · nothing compressed yet" in html
    assert '<div id="history" hx-swap-oob="true">' in html
    assert f"Restored snapshot {snapshot.pk}: 6 messages left the context" in html
    assert "snapshots-panel" in html
    assert "history only, not in the context" in html
    # The page opened anew says the same.
    page = owner_client.get(reverse("chat:chat", args=[due_session.pk])).content.decode()
    assert "compressed into checkpoint" not in page


def test_a_restore_from_its_own_page_is_confirmed_on_the_chat_page(due_session, owner_client):
    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="known good")
    answer = owner_client.post(reverse("context:snapshot_restore", args=[snapshot.pk]), follow=True)
    assert f"Restored snapshot {snapshot.pk}" in answer.content.decode()


def test_a_goal_completed_after_the_snapshot_comes_back_active_and_undated(due_session):
    goal = goal_create(session=due_session, description="Ship the beta")
    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL)
    goal_update(goal=goal, status=Goal.Status.COMPLETED)
    assert Goal.objects.get(pk=goal.pk).completed_at is not None

    snapshot_restore(snapshot=snapshot)
    goal.refresh_from_db()
    assert (goal.status, goal.completed_at) == (Goal.Status.ACTIVE, None)

    # And a goal completed before the snapshot keeps its date.
    goal_update(goal=goal, status=Goal.Status.COMPLETED)
    goal.refresh_from_db()
    completed = goal.completed_at
    done = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL)
    goal_update(goal=goal, status=Goal.Status.ACTIVE)
    snapshot_restore(snapshot=done)
    goal.refresh_from_db()
    assert (goal.status, goal.completed_at) == (Goal.Status.COMPLETED, completed)
