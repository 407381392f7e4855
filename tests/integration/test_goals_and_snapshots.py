from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string
from django.utils import timezone

from chat.models import Artifact, ContextEvent, Decision, Goal, GoalCheckpoint, ImmutableError, Session, Snapshot
from chat.selectors.context import active_goal, pinned_block, session_budget
from chat.services.goals import (
    artifact_record,
    decision_record,
    decision_update,
    goal_apply_markers,
    goal_checkpoint_set,
    goal_checkpoint_update,
    goal_create,
    goal_delete,
    goal_update,
)
from chat.services.messages import message_create
from chat.services.snapshots import snapshot_create
from engine.resources import count_text_tokens

pytestmark = pytest.mark.django_db

REPLY = """Done with the design.
[GOAL] Implement user authentication system
[CHECKPOINT] Design authentication flow - COMPLETED
[CHECKPOINT] Add JWT token generation - IN PROGRESS
[DECISION] Use JWT for authentication - LOCKED
[DECISION] Cache sessions in Redis
[ARTIFACT] Created src/auth/login.ts
[NEXT] Finish the JWT helper"""


def test_markers_in_a_reply_update_the_goal(chat_session):
    assert goal_apply_markers(session=chat_session, text=REPLY) == 7
    goal = active_goal(session=chat_session)
    assert goal is not None
    assert goal.description == "Implement user authentication system"
    assert [(c.description, c.status) for c in goal.checkpoints.all()] == [
        ("Design authentication flow", "completed"),
        ("Add JWT token generation", "in-progress"),
    ]
    assert [(d.description, d.locked) for d in Decision.objects.filter(session=chat_session)] == [
        ("Use JWT for authentication", True),
        ("Cache sessions in Redis", False),
    ]
    assert goal.next_step == "Finish the JWT helper"
    assert list(Artifact.objects.values_list("action", "path")) == [("created", "src/auth/login.ts")]


def test_a_repeated_marker_updates_instead_of_duplicating(chat_session):
    goal_apply_markers(session=chat_session, text=REPLY)
    goal_apply_markers(
        session=chat_session,
        text="[GOAL] implement USER authentication system\n"
        "[CHECKPOINT] Add JWT token generation - DONE\n[ARTIFACT] Created src/auth/login.ts",
    )
    assert Goal.objects.filter(session=chat_session).count() == 1
    goal = active_goal(session=chat_session)
    assert goal is not None
    assert goal.checkpoints.get(description="Add JWT token generation").status == "completed"
    assert Artifact.objects.count() == 1


def test_markers_never_unlock_a_locked_decision_but_the_user_can(chat_session):
    goal_apply_markers(session=chat_session, text=REPLY)
    goal_apply_markers(session=chat_session, text="[DECISION] Use JWT for authentication - UNLOCKED")
    decision = Decision.objects.get(description="Use JWT for authentication")
    assert decision.locked
    decision_update(decision=decision, locked=False)
    decision.refresh_from_db()
    assert not decision.locked


def test_progress_markers_without_a_goal_are_ignored(chat_session):
    assert goal_apply_markers(session=chat_session, text="[CHECKPOINT] x - DONE\n[NEXT] y") == 0
    assert not Goal.objects.exists()


def test_one_active_goal_at_a_time(chat_session):
    first = goal_create(session=chat_session, description="First", priority="high")
    second = goal_create(session=chat_session, description="Second")
    first.refresh_from_db()
    assert (first.status, second.status) == ("paused", "active")
    goal_update(goal=first, status="active")
    second.refresh_from_db()
    assert second.status == "paused"
    done = goal_update(goal=first, status="completed")
    assert done.completed_at is not None
    assert active_goal(session=chat_session) is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: goal_create(session=s, description="  "), "description is empty"),
        (lambda s: goal_create(session=s, description="x", priority="urgent"), "priority must be one of"),
        (lambda s: goal_create(session=s, description="x" * 2001), "the limit is 2,000"),
        (lambda s: goal_update(goal=goal_create(session=s, description="x"), status="gone"), "status must be"),
        (
            lambda s: goal_checkpoint_set(
                goal=goal_create(session=s, description="x"), description="c", status="later"
            ),
            "status must be one of pending",
        ),
        (lambda s: artifact_record(session=s, path="a.py", action="deleted"), "action must be one of"),
        (lambda s: decision_record(session=s, description=""), "description is empty"),
    ],
)
def test_bad_goal_input_is_refused_clearly(chat_session, call, message):
    with pytest.raises(ValidationError, match=message):
        call(chat_session)


def test_the_goal_block_counts_as_system_prompt_tokens(chat_session):
    base = session_budget(session=chat_session).system_prompt_tokens
    goal_apply_markers(session=chat_session, text=REPLY)
    block = pinned_block(session=chat_session)
    assert "🔒 Use JWT for authentication" in block
    assert "Cache sessions in Redis" not in block
    assert session_budget(session=chat_session).system_prompt_tokens == base + count_text_tokens(block)


def test_snapshot_holds_the_full_state_and_never_changes(chat_session):
    message_create(session=chat_session, role="user", content="hi")
    goal_apply_markers(session=chat_session, text=REPLY)
    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL, reason="before the refactor")
    assert snapshot.message_count == 1
    assert snapshot.checkpoint_count == 0
    assert snapshot.token_count == session_budget(session=chat_session).used
    assert (snapshot.model, snapshot.tier) == ("llama3.2:3b", 3)
    assert snapshot.state["session"]["system_prompt"] == "You are helpful."
    assert snapshot.state["decisions"][0] == {
        "id": snapshot.state["decisions"][0]["id"],
        "goal": snapshot.state["goals"][0]["id"],
        "description": "Use JWT for authentication",
        "locked": True,
    }
    assert ContextEvent.objects.get(type="snapshot-created").payload["snapshot"] == snapshot.id
    snapshot.reason = "edited"
    with pytest.raises(ImmutableError):
        snapshot.save()
    auto = snapshot_create(session=chat_session, kind=Snapshot.Kind.AUTO)
    assert ContextEvent.objects.get(type="auto-snapshot-created").payload["snapshot"] == auto.id


def test_locked_decisions_stay_pinned_without_a_goal(chat_session):
    decision_record(session=chat_session, description="Never use eval()", locked=True)
    decision_record(session=chat_session, description="Maybe Redis")
    assert pinned_block(session=chat_session) == "Locked decisions (never change these):\n🔒 Never use eval()"


def test_user_edits_of_goals_checkpoints_and_decisions(chat_session):
    goal = goal_create(session=chat_session, description="Ship login")
    edited = goal_update(goal=goal, description="Ship login and logout", priority="high")
    edited.refresh_from_db()
    assert (edited.description, edited.priority, edited.status) == ("Ship login and logout", "high", "active")

    step = goal_checkpoint_set(goal=goal, description="Write the form")
    goal_checkpoint_update(checkpoint=step, status="completed", description="Write the login form")
    step.refresh_from_db()
    assert (step.description, step.status) == ("Write the login form", "completed")

    decision = decision_record(session=chat_session, description="Use sessions", goal=goal)
    decision_update(decision=decision, description="Use server sessions", locked=True)
    decision.refresh_from_db()
    assert (decision.description, decision.locked) == ("Use server sessions", True)

    goal_delete(goal=goal)
    assert not Goal.objects.filter(pk=goal.pk).exists()
    assert not GoalCheckpoint.objects.filter(pk=step.pk).exists()
    decision.refresh_from_db()
    assert decision.goal_id is None


def test_every_write_to_the_goal_block_raises_the_context_version(chat_session):
    """The goal block is part of the context: a turn tells by the version that its goals panel must be re-sent."""

    def version() -> int:
        return Session.objects.values_list("context_version", flat=True).get(pk=chat_session.pk)

    seen = [version()]
    goal = goal_create(session=chat_session, description="Ship login")
    seen.append(version())
    goal_update(goal=goal, priority="high")
    seen.append(version())
    goal_update(goal=goal_create(session=chat_session, description="Ship logout"), status="paused")
    goal_update(goal=goal, status="active")  # pauses the other one
    seen.append(version())
    step = goal_checkpoint_set(goal=goal, description="Write the form")
    seen.append(version())
    goal_checkpoint_update(checkpoint=step, status="completed")
    seen.append(version())
    decision = decision_record(session=chat_session, description="Use sessions", goal=goal)
    seen.append(version())
    decision_update(decision=decision, locked=True)
    seen.append(version())
    artifact_record(session=chat_session, path="src/login.py", action="created", goal=goal)
    seen.append(version())
    goal_apply_markers(session=chat_session, text="[NEXT] Write the logout view")
    seen.append(version())
    goal_delete(goal=goal)
    seen.append(version())
    assert all(later > earlier for earlier, later in pairwise(seen)), seen
    # A reply without markers locks nothing and leaves the version alone.
    goal_apply_markers(session=chat_session, text="No markers in this reply.")
    assert version() == seen[-1]


def test_with_snapshots_off_the_pages_and_the_api_say_so(chat_session, owner_client, api):
    from django.urls import reverse

    from chat.services.session_settings import session_set_context_settings

    earlier = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL)
    session_set_context_settings(session=chat_session, settings={"snapshots": {"enabled": False}})
    chat = owner_client.get(reverse("chat:chat", args=[chat_session.pk])).content.decode()
    assert "Snapshots are off in this session's settings" in chat
    assert "Snapshot now</button>" not in chat
    refused = owner_client.post(reverse("context:snapshot_new", args=[chat_session.pk]), HTTP_HX_REQUEST="true")
    assert refused.status_code == 409
    assert "no snapshot was taken: snapshots are off" in refused.content.decode()
    assert (
        api.post(f"/api/sessions/{chat_session.pk}/snapshots", {}, content_type="application/json").status_code == 409
    )
    confirm = owner_client.get(reverse("context:snapshot_restore", args=[earlier.pk])).content.decode()
    assert "This restore cannot be undone" in confirm
    restored = api.post(f"/api/snapshots/{earlier.pk}/restore").json()
    assert restored["undo_snapshot"] is None
    assert list(Snapshot.objects.filter(session=chat_session)) == [earlier]


def test_the_restore_page_groups_its_figures(chat_session):
    # A snapshot never changes once stored: a stand-in with a four-digit count.
    snapshot = SimpleNamespace(created_at=timezone.now(), token_count=1509, checkpoint_count=2, message_count=40)
    meter = {"used": 2048, "max_tokens": 6800}
    page = render_to_string(
        "chat/snapshot_restore.html",
        {"session": chat_session, "snapshot": snapshot, "meter": meter, "written_after": 3, "undo_taken": True},
    )
    assert "what it was then: 1,509 tokens, 2 checkpoints" in page
    assert "Now: 2,048 / 6,800 tokens" in page


def test_the_pinned_blocks_of_several_sessions_are_each_their_own_and_read_in_two_queries(
    chat_session, user, django_assert_num_queries
):
    from chat.selectors.context import pinned_blocks
    from chat.services.sessions import session_create
    from engine.core.prompts import ArtifactView, DecisionView, GoalCheckpointView, GoalView, render_pinned_block

    other = session_create(owner=user, model="llama3.2:3b", context_size=4096)
    Goal.objects.create(session=chat_session, description="Plan the garden")
    newest = Goal.objects.create(session=chat_session, description="Move to Lisbon", next_step="Book the flights")
    goal_checkpoint_set(goal=newest, description="Sell the car", status="completed")
    decision_record(session=chat_session, description="Keep the flat", locked=True)
    decision_record(session=chat_session, description="Maybe a smaller one")
    decision_record(session=other, description="Use PostgreSQL 16", locked=True)
    artifact_record(session=other, path="plan.md", action="created")
    with django_assert_num_queries(2):
        blocks = pinned_blocks(session_ids=[chat_session.pk, other.pk])
    decisions = (DecisionView("Keep the flat", True), DecisionView("Maybe a smaller one", False))
    # The newest active goal is the session's; its steps, and every decision of the session, are in its block.
    assert blocks[chat_session.pk] == render_pinned_block(
        goal=GoalView(
            "Move to Lisbon", "medium", "active", (GoalCheckpointView("Sell the car", "completed"),), decisions,
            "Book the flights",
        ),
        locked_decisions=["Keep the flat"],
        artifacts=[],
    )  # fmt: skip
    assert blocks[other.pk] == render_pinned_block(
        goal=None, locked_decisions=["Use PostgreSQL 16"], artifacts=[ArtifactView("created", "plan.md")]
    )
    with django_assert_num_queries(1):
        assert pinned_blocks(session_ids=[other.pk]) == {other.pk: blocks[other.pk]}
