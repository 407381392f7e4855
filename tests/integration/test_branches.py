"""Branches (chat.services.sessions.session_branch): a new session sharing its parent's history up to a message,
starting from the managed state the parent had there; from the service, the chat page and the REST API.
The outside clients' Regenerate and Edit: test_drop_in_branches.py."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat.models import Checkpoint, Decision, Goal, Message, Session, Snapshot
from chat.selectors.context import pinned_block
from chat.services.compression import compression_run
from chat.services.goals import decision_record, decision_update, goal_checkpoint_set, goal_create
from chat.services.messages import NewMessage, message_create
from chat.services.sessions import session_branch
from chat.services.snapshots import snapshot_create
from engine.core.tokens import TokenCount
from tests.factories import converse, frozen, prompt, small_session
from tests.support.timing import scaled

pytestmark = pytest.mark.django_db

GOAL = "Ship secure logins"
DECISION = "Argon2 only"


def managed(session: Any, gateway: Any, fake_ollama: Any) -> Checkpoint:
    """``session`` (due) with a goal and its progress, a locked decision, and one compression's checkpoint."""
    goal = goal_create(session=session, description=GOAL, priority="high")
    goal_checkpoint_set(goal=goal, description="Hash passwords", status="completed")
    decision_record(session=session, description=DECISION, locked=True, goal=goal)
    fake_ollama.behaviour.canned_reply = "First summary."
    assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
    return Checkpoint.objects.get(session=session)


def compressed_positions(session: Session) -> dict[int, int]:
    """Each compressed message's position, with the number of its checkpoint."""
    rows = Message.objects.filter(session=session, compressed_into__isnull=False).order_by("position")
    return dict(rows.values_list("position", "compressed_into__number"))


def test_a_branch_after_the_checkpoint_has_the_goal_decision_checkpoint_and_shared_prefix(
    due_session, gateway, fake_ollama
):
    checkpoint = managed(due_session, gateway, fake_ollama)
    converse(due_session, 2, start=100)
    at = Message.objects.filter(session=due_session).order_by("-position")[1]  # a message after the checkpoint
    assert checkpoint.last_position is not None
    assert at.position > checkpoint.last_position
    before = frozen(due_session)

    branch = session_branch(session=due_session, at_message=at)

    assert frozen(due_session) == before  # the parent is unchanged
    assert (branch.parent_id, branch.forked_at_position, branch.owner_id) == (
        due_session.pk,
        at.position,
        due_session.owner_id,
    )
    shared = Message.objects.filter(session=due_session, position__lte=at.position).order_by("position")
    assert list(Message.objects.filter(session=branch).order_by("position").values_list("role", "content")) == list(
        shared.values_list("role", "content")
    )
    [copied] = Checkpoint.objects.filter(session=branch)
    assert copied.pk != checkpoint.pk
    assert (copied.number, copied.summary, copied.message_range, copied.level) == (
        checkpoint.number,
        checkpoint.summary,
        checkpoint.message_range,
        checkpoint.level,
    )
    assert copied.revisions.count() == checkpoint.revisions.count() >= 1
    assert compressed_positions(branch) == compressed_positions(due_session)
    goal = Goal.objects.get(session=branch)
    assert (goal.description, goal.priority, goal.status) == (GOAL, "high", "active")
    assert [(c.description, c.status) for c in goal.checkpoints.all()] == [("Hash passwords", "completed")]
    assert (DECISION, True, goal.pk) in Decision.objects.filter(session=branch).values_list(
        "description", "locked", "goal_id"
    )
    assert branch.compression_count == due_session.compression_count
    # The branch's next prompt is its parent's up to the fork: pinned block, checkpoint, then the shared messages.
    assert f"ACTIVE GOAL: {GOAL}" in pinned_block(session=branch)
    later = Message.objects.filter(session=due_session, position__gt=at.position).count()
    assert prompt(branch) == prompt(due_session)[:-later]


def test_a_branch_copies_each_field_of_the_shared_messages_and_of_the_checkpoint_revisions(
    due_session, gateway, fake_ollama
):
    checkpoint = managed(due_session, gateway, fake_ollama)
    [reply] = converse(due_session, 1, start=100)
    Message.objects.filter(pk=reply.pk).update(
        tokens_exact=True,
        done_reason="length",
        tool_call_id="call-1",
        tool_name="read_file",
        tool_args={"path": "a.py"},
        tool_result={"lines": 3},
        source_format={"parts": [2, 5]},
    )

    branch = session_branch(session=due_session, at_message=reply)

    # What the branch sets itself (its place in the context, a version's link) the other tests check.
    message_fields = [
        "position", "role", "content", "tokens", "tokens_exact", "created_at", "done_reason",
        "tool_call_id", "tool_name", "tool_args", "tool_result", "source_format",
    ]  # fmt: skip
    assert list(Message.objects.filter(session=branch).order_by("position").values_list(*message_fields)) == list(
        Message.objects.filter(session=due_session).order_by("position").values_list(*message_fields)
    )
    revision_fields = [
        "level", "tokens", "summary", "reason", "retention", "facts_total", "facts_kept", "missing_facts",
        "ledger_dropped",
    ]  # fmt: skip
    [copied] = Checkpoint.objects.filter(session=branch)
    assert list(copied.revisions.order_by("id").values_list(*revision_fields)) == list(
        checkpoint.revisions.order_by("id").values_list(*revision_fields)
    )
    assert checkpoint.revisions.exists()


def test_a_branch_before_the_last_checkpoint_starts_from_the_snapshot_at_or_before_it(
    due_session, gateway, fake_ollama
):
    first = managed(due_session, gateway, fake_ollama)
    snapshot = snapshot_create(session=due_session, kind=Snapshot.Kind.MANUAL, reason="after the first")
    converse(due_session, 3, start=100, answer="A later answer. " * 30)
    decision = Decision.objects.get(session=due_session, description=DECISION)
    decision_update(decision=decision, locked=False)
    goal_create(session=due_session, description="Something else entirely")
    fake_ollama.behaviour.canned_reply = "Second summary."
    assert compression_run(session_id=due_session.pk, gateway=gateway, force=True).status == "compressed"
    second = Checkpoint.objects.get(session=due_session, number=2)
    fork = snapshot.message_count + 1
    assert second.last_position is not None
    assert fork < second.last_position
    before = frozen(due_session)

    branch = session_branch(session=due_session, at_message=due_session.messages.get(position=fork))

    assert frozen(due_session) == before
    # The first checkpoint as the snapshot held it; the second (which took messages after the fork) is not there.
    [copied] = Checkpoint.objects.filter(session=branch)
    assert (copied.number, copied.summary, copied.message_range) == (1, first.summary, first.message_range)
    assert set(compressed_positions(branch).values()) == {1}
    assert set(compressed_positions(branch)) == {p for p, n in compressed_positions(due_session).items() if n == 1}
    # Written after the snapshot, up to the fork: in the branch's context.
    assert not Message.objects.filter(
        session=branch, position__gt=snapshot.message_count, compressed_into__isnull=False
    ).exists()
    assert list(Goal.objects.filter(session=branch).values_list("description", flat=True)) == [GOAL]
    assert Decision.objects.get(session=branch, description=DECISION).locked  # locked then, unlocked since
    assert branch.compression_count == 1
    assert Message.objects.filter(session=branch).count() == fork


def test_without_a_snapshot_that_old_a_branch_before_the_checkpoint_has_no_checkpoint_but_the_goal(
    due_session, gateway, fake_ollama
):
    checkpoint = managed(due_session, gateway, fake_ollama)
    Snapshot.objects.filter(session=due_session).delete()
    assert checkpoint.last_position is not None
    fork = checkpoint.last_position - 1

    branch = session_branch(session=due_session, at_message=due_session.messages.get(position=fork))

    assert not Checkpoint.objects.filter(session=branch).exists()
    assert not Message.objects.filter(session=branch, compressed_into__isnull=False).exists()
    assert branch.compression_count == 0
    # The goal and the decision were set after every message of the fixture, so after the fork too:
    # the branch starts without them, as the parent stood there (issue 47, item 8).
    assert not Goal.objects.filter(session=branch).exists()
    assert not Decision.objects.filter(session=branch).exists()
    assert Goal.objects.get(session=due_session).description == GOAL
    assert Checkpoint.objects.filter(session=due_session).count() == 1  # the parent's stays


def test_a_branch_with_new_messages_holds_them_after_the_shared_prefix(chat_session):
    goal_create(session=chat_session, description=GOAL)
    for text in ("One?", "Two?"):
        message_create(session=chat_session, role="user", content=text)
    first = chat_session.messages.get(position=1)

    branch = session_branch(
        session=chat_session,
        at_message=first,
        messages=[NewMessage(role="user", content="Three?", token_count=TokenCount(3, exact=False))],
    )
    assert list(branch.messages.order_by("position").values_list("position", "content")) == [(1, "One?"), (2, "Three?")]
    assert list(chat_session.messages.order_by("position").values_list("content", flat=True)) == ["One?", "Two?"]
    assert Goal.objects.get(session=branch).description == GOAL


def test_branch_from_here_on_the_chat_page(owner_client, chat_session, other_user):
    for text in ("One?", "Two?", "Three?"):
        message_create(session=chat_session, role="user", content=text)
    at = chat_session.messages.get(position=2)
    page = owner_client.get(reverse("chat:chat", args=[chat_session.pk])).content.decode()
    url = reverse("chat:message_branch", args=[chat_session.pk, at.pk])
    assert f'hx-post="{url}"' in page
    assert "Branch from here" in page

    assert owner_client.get(url).status_code == 405
    response = owner_client.post(url)
    branch = Session.objects.get(parent=chat_session)
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:chat", args=[branch.pk])
    assert branch.forked_at_position == 2
    assert list(branch.messages.order_by("position").values_list("content", flat=True)) == ["One?", "Two?"]
    hx = owner_client.post(url, headers={"HX-Request": "true"})
    assert hx.status_code == 200
    assert Session.objects.filter(parent=chat_session).count() == 2

    shown = owner_client.get(reverse("chat:chat", args=[branch.pk])).content.decode()
    assert f'Branch of <a href="{reverse("chat:chat", args=[chat_session.pk])}">' in shown
    assert "at message 2" in shown
    parent_page = owner_client.get(reverse("chat:chat", args=[chat_session.pk])).content.decode()
    assert "2 branches of this session" in parent_page
    assert reverse("chat:chat", args=[branch.pk]) in parent_page
    listing = owner_client.get(reverse("chat:session_list")).content.decode()
    assert f"branch of {chat_session.title} at message 2" in listing

    # Another user, a message the session does not have: 404, nothing made.
    bob = Client()
    bob.force_login(other_user)
    assert bob.post(url).status_code == 404
    wrong = reverse("chat:message_branch", args=[chat_session.pk, at.pk + 10_000])
    assert owner_client.post(wrong).status_code == 404
    assert Session.objects.filter(parent=chat_session).count() == 2


def test_the_rest_api_branches_by_message_id_or_position(api, bob_api, chat_session):
    for text in ("One?", "Two?", "Three?"):
        message_create(session=chat_session, role="user", content=text)
    goal_create(session=chat_session, description=GOAL)
    url = f"/api/sessions/{chat_session.pk}/branch"

    def post(client: Any, body: dict[str, Any]) -> Any:
        return client.post(url, json.dumps(body), content_type="application/json")

    by_id = post(api, {"message_id": chat_session.messages.get(position=1).pk})
    assert by_id.status_code == 201, by_id.content
    assert (by_id.json()["parent_id"], by_id.json()["forked_at_position"]) == (str(chat_session.pk), 1)
    by_position = post(api, {"position": 3})
    assert by_position.status_code == 201
    branch = Session.objects.get(pk=by_position.json()["id"])
    assert branch.messages.count() == 3
    assert Goal.objects.get(session=branch).description == GOAL
    detail = api.get(f"/api/sessions/{branch.pk}").json()
    assert detail["parent_id"] == str(chat_session.pk)
    assert api.get(f"/api/sessions/{chat_session.pk}").json()["parent_id"] is None

    assert post(api, {"position": 4}).status_code == 404
    assert post(api, {}).status_code == 422
    assert post(api, {"position": 1, "message_id": 1}).status_code == 422
    assert post(bob_api, {"position": 1}).status_code == 404
    assert Session.objects.filter(parent=chat_session).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_branch_waits_for_a_write_holding_the_sessions_row_and_copies_what_it_committed(chat_session):
    """A compression, a goal change and a restore write under the session's row lock; a branch made
    meanwhile copies the session as that write left it, not half of it (on PostgreSQL, whose reads
    would otherwise each see what was committed when they ran)."""
    from django.db import connection, connections, transaction

    for role, content in (("user", "Which hash?"), ("assistant", "Argon2.")):
        message_create(session=chat_session, role=role, content=content)
    locked, release = threading.Event(), threading.Event()

    def write_under_the_lock() -> None:
        try:
            with transaction.atomic():
                Session.objects.select_for_update().get(pk=chat_session.pk)
                Goal.objects.create(session=chat_session, description=GOAL, priority="high")
                locked.set()
                assert release.wait(scaled(60))
        finally:
            connections.close_all()

    branches: list[Session] = []

    def branch() -> None:
        try:
            branches.append(session_branch(session=chat_session, at_message=chat_session.messages.get(position=2)))
        finally:
            connections.close_all()

    writer = threading.Thread(target=write_under_the_lock)
    writer.start()
    assert locked.wait(scaled(60))
    brancher = threading.Thread(target=branch)
    brancher.start()
    if connection.vendor == "postgresql":
        # Until the branch waits for the row lock (SQLite's writers wait for each other's whole transaction).
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        with connection.cursor() as cursor:
            for _ in range(600):
                cursor.execute(waiting)
                if cursor.fetchone()[0]:
                    break
                release.wait(0.1)
            else:
                pytest.fail("the branch never waited for the session's row")
    release.set()
    writer.join(scaled(60))
    brancher.join(scaled(60))
    [made] = branches
    assert list(made.goals.values_list("description", flat=True)) == [GOAL]


def test_a_branch_has_the_goals_and_decisions_of_its_message_not_later_ones(user):
    """Issue 47, item 8: a branch made at message 9 inherited a goal and a locked decision added after message 11.
    Nothing is compressed, so no snapshot is needed: the history says what came when."""
    session = small_session(user)
    first = goal_create(session=session, description="Plan the harbour wall")
    decision_record(session=session, description="Concrete C35/45", locked=True)
    converse(session, 6)  # messages 1-12
    later = goal_create(session=session, description="Order the crane")  # pauses the first
    decision_record(session=session, description="Crane from Rotterdam", locked=True)
    decision_update(decision=Decision.objects.get(session=session, description="Concrete C35/45"), locked=False)
    converse(session, 1, start=50)
    at = Message.objects.get(session=session, position=9)

    branch = session_branch(session=session, at_message=at)

    goals = dict(Goal.objects.filter(session=branch).values_list("description", "status"))
    assert goals == {"Plan the harbour wall": "active"}
    decisions = list(Decision.objects.filter(session=branch).values_list("description", "locked"))
    # The decision was unlocked after message 12: with no snapshot from before, as it is now; the one
    # added later is not there.
    assert decisions == [("Concrete C35/45", False)]
    # The parent keeps its own.
    assert Goal.objects.get(pk=first.pk).status == "paused"
    assert Goal.objects.get(pk=later.pk).status == "active"

    # With a snapshot from before the change, the decision is as the snapshot holds it.
    snapshot_session = small_session(user)
    decision_record(session=snapshot_session, description="Steel piles", locked=True)
    converse(snapshot_session, 3)
    snapshot_create(session=snapshot_session, kind=Snapshot.Kind.MANUAL)
    converse(snapshot_session, 2, start=20)
    decision_update(decision=Decision.objects.get(session=snapshot_session), locked=False)
    converse(snapshot_session, 1, start=40)
    branch = session_branch(
        session=snapshot_session, at_message=Message.objects.get(session=snapshot_session, position=9)
    )
    assert list(Decision.objects.filter(session=branch).values_list("description", "locked")) == [("Steel piles", True)]
