"""Goal-Aware Compression"""

from __future__ import annotations

import pytest

from contextmgr.core.prompts import (
    DecisionView,
    GoalCheckpointView,
    GoalView,
    PromptMessage,
    build_goal_summary_prompt,
)
from contextmgr.core.window import chat_messages
from contextmgr.models import Goal
from contextmgr.selectors import session_window
from contextmgr.services.compression import compression_run
from contextmgr.services.goals import (
    artifact_record,
    decision_record,
    goal_checkpoint_set,
    goal_create,
    goal_update,
)
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
    assert prompt.endswith(
        "Provide a concise summary that maintains essential information for continuing work on the goal."
    )
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
