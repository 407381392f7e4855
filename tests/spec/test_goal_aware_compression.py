"""Goal-Aware Compression"""

from __future__ import annotations

import pytest

from chat.models import Artifact, Checkpoint, ContextEvent, Decision, Goal
from chat.selectors.context import session_window
from chat.services.compression import compression_run
from chat.services.events import event_record
from chat.services.goals import (
    artifact_record,
    decision_record,
    goal_checkpoint_set,
    goal_create,
    goal_update,
)
from chat.services.sessions import session_update
from engine.core.prompts import (
    SUMMARY_MARKERS_REQUEST,
    DecisionView,
    GoalCheckpointView,
    GoalView,
    PromptMessage,
    build_goal_summary_prompt,
)
from engine.core.window import chat_messages
from tests.factories import created, until_due

GOAL = GoalView(
    description="Implement user authentication system",
    priority="high",
    status="active",
    checkpoints=(
        GoalCheckpointView("Design authentication flow", "completed"),
        GoalCheckpointView("Add JWT token generation", "in-progress"),
        GoalCheckpointView("User registration", "pending"),
    ),
    decisions=(DecisionView("Use JWT for authentication", True), DecisionView("Maybe try sessions", False)),
)


def test_goal_aware_prompt_header():
    """Spec: "ACTIVE GOAL: ${goal.description}", "Priority: ${goal.priority}", "Status: ${goal.status}",
    "COMPLETED CHECKPOINTS:" with "✅", "IN PROGRESS:" with "🔄", "PENDING:" with "⏳",
    "LOCKED DECISIONS:" with "🔒"."""
    prompt = build_goal_summary_prompt(GOAL, [PromptMessage("assistant", "We built the login form.")])
    assert prompt.startswith("ACTIVE GOAL: Implement user authentication system\nPriority: high\nStatus: active\n")
    assert "COMPLETED CHECKPOINTS:\n✅ Design authentication flow\n" in prompt
    assert "IN PROGRESS:\n🔄 Add JWT token generation\n" in prompt
    assert "PENDING:\n⏳ User registration\n" in prompt
    assert "LOCKED DECISIONS:\n🔒 Use JWT for authentication\n" in prompt
    assert "Maybe try sessions" not in prompt, "only locked decisions are listed"


def test_goal_aware_prompt_instructions():
    """Spec: "Summarize the following conversation, focusing on progress toward the goal:", the "PRESERVE:" and
    "SUMMARIZE AGGRESSIVELY:" lists, and "Provide a concise summary that maintains essential information for
    continuing work on the goal."."""
    prompt = build_goal_summary_prompt(GOAL, [PromptMessage("assistant", "We built the login form.")])
    assert "---\n\nSummarize the following conversation, focusing on progress toward the goal:\n" in prompt
    assert "assistant: We built the login form." in prompt
    preserve = (
        "PRESERVE:\n- Decisions made toward the goal\n- Checkpoints completed\n- Files created/modified\n"
        "- Blockers encountered\n- Technical details relevant to the goal\n- Next steps planned\n"
    )
    aggressive = (
        "SUMMARIZE AGGRESSIVELY:\n- Off-topic discussions\n- Exploratory conversations\n"
        "- Debugging steps that succeeded\n- Repeated information\n"
    )
    assert preserve in prompt
    assert aggressive in prompt
    assert (
        "Provide a concise summary that maintains essential information for continuing work on the goal.\n\n"
        + SUMMARY_MARKERS_REQUEST
    ) in prompt, "the spec's text, then the request for its structured part (docs/conformance.md)"
    assert prompt.endswith(SUMMARY_MARKERS_REQUEST)
    assert prompt.index("focusing on progress") < prompt.index("We built") < prompt.index("PRESERVE:")


@pytest.mark.django_db
def test_goals_guide_the_compression(due_session, gateway, fake_ollama):
    """Spec: "Goals guide the compression process by helping the LLM understand what information is
    important to preserve."."""
    fake_ollama.behaviour.canned_reply = "Progress toward logins."
    goal = goal_create(session=due_session, description="Ship secure logins", priority="high")
    goal_checkpoint_set(goal=goal, description="Design the flow", status="completed")
    decision_record(session=due_session, description="Argon2 only", locked=True, goal=goal)
    compression_run(session_id=due_session.pk, gateway=gateway)
    (request,) = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    prompt = request["messages"][-1]["content"]
    assert prompt.startswith("ACTIVE GOAL: Ship secure logins\nPriority: high\nStatus: active")
    assert "✅ Design the flow" in prompt
    assert "🔒 Argon2 only" in prompt
    assert "focusing on progress toward the goal" in prompt


@pytest.mark.django_db
def test_without_an_active_goal_the_plain_prompt_is_used(due_session, gateway, fake_ollama):
    """Spec: "Summarize the following conversation history, preserving key decisions, code changes,
    and important context:"."""
    fake_ollama.behaviour.canned_reply = "Recap."
    goal = goal_create(session=due_session, description="Old goal")
    goal_update(goal=goal, status="paused")
    compression_run(session_id=due_session.pk, gateway=gateway)
    (request,) = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    assert request["messages"][-1]["content"].startswith("Summarize the following conversation history")


@pytest.mark.django_db
def test_goal_structure(chat_session):
    """Spec: "interface Goal" with "priority: 'high' | 'medium' | 'low'", "status: 'active' | 'paused' | 'completed'",
    "createdAt", "completedAt?", "checkpoints", "decisions", "artifacts"."""
    assert Goal.Priority.values == ["high", "medium", "low"]
    assert Goal.Status.values == ["active", "paused", "completed"]
    goal = goal_create(session=chat_session, description="Ship it", priority="low")
    goal_checkpoint_set(goal=goal, description="Step", status="in-progress")
    decision_record(session=chat_session, description="Keep it simple", goal=goal)
    artifact_record(session=chat_session, path="src/app.py", action="modified", goal=goal)
    assert goal.created_at is not None
    assert goal.completed_at is None
    assert [c.status for c in goal.checkpoints.all()] == ["in-progress"]
    assert [d.description for d in goal.decisions.all()] == ["Keep it simple"]
    assert [(a.action, a.path) for a in goal.artifacts.all()] == [("modified", "src/app.py")]
    goal_update(goal=goal, status="completed")
    assert goal.completed_at is not None


@pytest.mark.django_db
def test_goal_is_always_preserved(due_session, gateway, fake_ollama):
    """Spec: "**Always Preserved (Never Compressed):**" "Active goal description", "All checkpoints (pending,
    in-progress, completed)", "Locked decisions", "Artifact list (files created/modified)", "Next steps"."""
    fake_ollama.behaviour.canned_reply = "Recap."
    goal = goal_create(session=due_session, description="Implement user authentication system", priority="high")
    for description, status in (
        ("Design flow", "completed"),
        ("JWT generation", "in-progress"),
        ("Sign-up", "pending"),
    ):
        goal_checkpoint_set(goal=goal, description=description, status=status)
    decision_record(session=due_session, description="Use JWT for authentication", locked=True, goal=goal)
    artifact_record(session=due_session, path="src/auth/login.ts", action="created", goal=goal)
    artifact_record(session=due_session, path="src/routes/api.ts", action="modified", goal=goal)
    goal.next_step = "Complete JWT token generation"
    goal.save()
    turn = 100
    for _ in range(3):
        assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
        turn = until_due(due_session, start=turn)
    system = chat_messages(session_window(session=due_session))[0][1]
    for text in (
        "ACTIVE GOAL: Implement user authentication system",
        "✅ Design flow",
        "🔄 JWT generation",
        "⏳ Sign-up",
        "🔒 Use JWT for authentication",
        "Created src/auth/login.ts",
        "Modified src/routes/api.ts",
        "Next: Complete JWT token generation",
    ):
        assert text in system
    # The goal block sits before every checkpoint: it is not part of what aging rewrites.
    assert system.index("Next: Complete JWT token generation") < system.index("[Checkpoint 1")


@pytest.mark.django_db
def test_compression_records_new_decisions_and_artifacts(due_session, gateway, fake_ollama):
    """Spec: "**Updated During Compression:**" "New decisions added", "New artifacts recorded".

    Checked as: the checkpoint a compression creates keeps the decisions, files and next steps that markers in its
    messages named, whatever the summary says (docs/how-it-works.md, "A compression")."""
    from chat.models import Message

    fake_ollama.behaviour.canned_reply = "Recap without any of it."
    first_reply = Message.objects.filter(session=due_session, role="assistant").order_by("position").first()
    assert first_reply is not None
    Message.objects.filter(pk=first_reply.pk).update(
        content="[DECISION] Store tokens in httpOnly cookies - LOCKED\n[ARTIFACT] Created src/auth/jwt.ts\n"
        "[NEXT] Move to user registration\n" + first_reply.content
    )
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    checkpoint = created(outcome)
    assert first_reply.pk in set(checkpoint.messages.values_list("pk", flat=True))
    assert checkpoint.key_decisions == ["Store tokens in httpOnly cookies"]
    assert checkpoint.files_modified == ["src/auth/jwt.ts"]
    assert checkpoint.next_steps == ["Move to user registration"]
    system = chat_messages(session_window(session=due_session))[0][1]
    assert "Decisions: Store tokens in httpOnly cookies" in system
    assert "Files: src/auth/jwt.ts" in system


# What a goal-aware summary ends with (SUMMARY_MARKERS_REQUEST), as a model answers it: one
# checkpoint completed, one copied back as in progress, one invented, the request's placeholder
# copied, a new decision, the locked decision said unlocked, a new artifact.
SUMMARY_WITH_MARKERS = """The login endpoint was built and tested; tokens are next.
[CHECKPOINT] implement login endpoint - COMPLETED
[CHECKPOINT] Design the flow - IN PROGRESS
[CHECKPOINT] Invent a checkpoint - COMPLETED
[CHECKPOINT] <checkpoint> - COMPLETED
[DECISION] Rate-limit logins per address
[DECISION] Argon2 only - UNLOCKED
[ARTIFACT] Created src/auth/login.py
[ARTIFACT] Modified <path>"""


def _goal_with_progress(session):
    goal = goal_create(session=session, description="Ship secure logins", priority="high")
    goal_checkpoint_set(goal=goal, description="Design the flow", status="completed")
    goal_checkpoint_set(goal=goal, description="Implement login endpoint", status="in-progress")
    decision_record(session=session, description="Argon2 only", locked=True, goal=goal)
    return goal


@pytest.mark.django_db
def test_compression_updates_the_goal_from_the_summary(due_session, gateway, fake_ollama):
    """Spec: "**Updated During Compression:**" "Checkpoint status (marked as completed)", "New decisions added",
    "New artifacts recorded"; "[DECISION] Use JWT for authentication - LOCKED" is never changed.

    The summary's structured part (docs/conformance.md, "Goals updated during compression") is applied as a
    marker in a reply would, and the compression's event says what it changed."""
    goal = _goal_with_progress(due_session)
    fake_ollama.behaviour.canned_reply = SUMMARY_WITH_MARKERS
    checkpoint = created(compression_run(session_id=due_session.pk, gateway=gateway))

    statuses = {cp.description: cp.status for cp in goal.checkpoints.all()}
    assert statuses == {"Design the flow": "completed", "Implement login endpoint": "completed"}, (
        "forward only, never back, never an invented checkpoint or a placeholder"
    )
    decisions = {d.description: d.locked for d in Decision.objects.filter(session=due_session)}
    assert decisions == {"Argon2 only": True, "Rate-limit logins per address": False}
    assert [(a.action, a.path) for a in Artifact.objects.filter(session=due_session)] == [
        ("created", "src/auth/login.py")
    ]
    event = ContextEvent.objects.get(session=due_session, type="compressed")
    assert event.payload["goal_updates"] == [
        "checkpoint “Implement login endpoint” completed",
        "decision “Rate-limit logins per address”",
        "artifact created src/auth/login.py",
    ]
    # The checkpoint keeps the prose as its summary and what the markers named as its structure.
    assert checkpoint.summary == "The login endpoint was built and tested; tokens are next."
    assert "Rate-limit logins per address" in checkpoint.key_decisions
    assert "src/auth/login.py" in checkpoint.files_modified
    # The next prompt pins what the summary settled.
    system = chat_messages(session_window(session=due_session))[0][1]
    assert "✅ Implement login endpoint" in system
    assert "Created src/auth/login.py" in system


@pytest.mark.django_db
def test_a_failed_compression_leaves_the_goal_as_it_was(due_session, gateway, fake_ollama, monkeypatch):
    """Spec: "compression-error - Compression failed": the goal updates of a summary belong to its compression
    and are undone with it."""
    goal = _goal_with_progress(due_session)
    fake_ollama.behaviour.canned_reply = SUMMARY_WITH_MARKERS

    def fail_on_compressed(**kwargs):
        if kwargs["type"] == "compressed":
            raise RuntimeError("database went away")
        return event_record(**kwargs)

    monkeypatch.setattr("chat.services.checkpoints.event_record", fail_on_compressed)
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert outcome.status == "error"
    assert not Checkpoint.objects.filter(session=due_session).exists()
    assert {cp.description: cp.status for cp in goal.checkpoints.all()} == {
        "Design the flow": "completed",
        "Implement login endpoint": "in-progress",
    }
    assert list(Decision.objects.filter(session=due_session).values_list("description", flat=True)) == ["Argon2 only"]
    assert not Artifact.objects.filter(session=due_session).exists()


@pytest.mark.django_db
def test_an_extract_updates_no_goal(due_session, gateway, fake_ollama):
    """Spec: "strategy: 'summarize' | 'truncate'": the truncate strategy writes no summary of its own, so
    nothing in it is applied to the goal (the replies' markers were applied when they arrived)."""
    goal = _goal_with_progress(due_session)
    session_update(session=due_session, settings={"compression": {"strategy": "truncate"}})
    created(compression_run(session_id=due_session.pk, gateway=gateway))
    assert {cp.description: cp.status for cp in goal.checkpoints.all()}["Implement login endpoint"] == "in-progress"
    assert "goal_updates" not in ContextEvent.objects.get(session=due_session, type="compressed").payload
