"""Goal Markers"""

from __future__ import annotations

import pytest

from chat.models import Artifact, Decision, Goal
from chat.services.goals import decision_record, goal_apply_markers
from engine.core.markers import (
    ArtifactRecord,
    CheckpointUpdate,
    DecisionUpdate,
    GoalSet,
    NextStep,
    parse_markers,
)

SPEC_EXAMPLE = """\
[GOAL] Implement user authentication system
[CHECKPOINT] Design authentication flow - COMPLETED
[CHECKPOINT] Implement login endpoint - COMPLETED
[CHECKPOINT] Add JWT token generation - IN PROGRESS
[DECISION] Use JWT for authentication - LOCKED
[DECISION] Store tokens in httpOnly cookies - LOCKED
[ARTIFACT] Created src/auth/login.ts
[ARTIFACT] Created src/auth/jwt.ts
[ARTIFACT] Modified src/routes/api.ts
[NEXT] Complete JWT token generation, then move to user registration
"""


def test_spec_marker_example_is_parsed():
    """Spec: "The LLM can use special markers in its output to update goals:" followed by the example block
    ("[GOAL] Implement user authentication system" ... "[NEXT] Complete JWT token generation, ...")."""
    assert parse_markers(SPEC_EXAMPLE) == [
        GoalSet("Implement user authentication system"),
        CheckpointUpdate("Design authentication flow", "completed"),
        CheckpointUpdate("Implement login endpoint", "completed"),
        CheckpointUpdate("Add JWT token generation", "in-progress"),
        DecisionUpdate("Use JWT for authentication", locked=True),
        DecisionUpdate("Store tokens in httpOnly cookies", locked=True),
        ArtifactRecord("created", "src/auth/login.ts"),
        ArtifactRecord("created", "src/auth/jwt.ts"),
        ArtifactRecord("modified", "src/routes/api.ts"),
        NextStep("Complete JWT token generation, then move to user registration"),
    ]


def test_text_without_markers_changes_nothing():
    """Spec: "The LLM can use special markers in its output to update goals:" — only marker lines count."""
    assert parse_markers("We talked about [GOAL] in passing.\nNo markers here.\n[UNKNOWN] thing") == []


@pytest.mark.django_db
def test_markers_in_a_reply_update_the_goal(chat_session):
    """Spec: "The LLM can use special markers in its output to update goals:" and the structure it produces:
    "Checkpoints: ✅ Design flow, ✅ Login endpoint, 🔄 JWT generation", "Decisions: 🔒 Use JWT, 🔒 httpOnly cookies",
    "Artifacts: Created login.ts, jwt.ts, Modified api.ts"."""
    applied = goal_apply_markers(session=chat_session, text="Here is the progress.\n" + SPEC_EXAMPLE)
    assert applied == 10
    goal = Goal.objects.get(session=chat_session, status="active")
    assert goal.description == "Implement user authentication system"
    assert [(c.description, c.status) for c in goal.checkpoints.all()] == [
        ("Design authentication flow", "completed"),
        ("Implement login endpoint", "completed"),
        ("Add JWT token generation", "in-progress"),
    ]
    assert list(Decision.objects.filter(session=chat_session).values_list("description", "locked")) == [
        ("Use JWT for authentication", True),
        ("Store tokens in httpOnly cookies", True),
    ]
    assert list(Artifact.objects.filter(session=chat_session).values_list("action", "path")) == [
        ("created", "src/auth/login.ts"),
        ("created", "src/auth/jwt.ts"),
        ("modified", "src/routes/api.ts"),
    ]
    assert goal.next_step == "Complete JWT token generation, then move to user registration"


@pytest.mark.django_db
def test_a_later_marker_advances_a_checkpoint(chat_session):
    """Spec: "Checkpoint status (marked as completed)"."""
    goal_apply_markers(session=chat_session, text=SPEC_EXAMPLE)
    goal_apply_markers(session=chat_session, text="[CHECKPOINT] Add JWT token generation - COMPLETED")
    goal = Goal.objects.get(session=chat_session, status="active")
    assert goal.checkpoints.get(description="Add JWT token generation").status == "completed"
    assert goal.checkpoints.count() == 3


@pytest.mark.django_db
def test_markers_never_change_a_locked_decision(chat_session):
    """Spec: "[DECISION] Use JWT for authentication - LOCKED" and "Decisions prevent backtracking"."""
    decision_record(session=chat_session, description="Use JWT for authentication", locked=True)
    goal_apply_markers(session=chat_session, text="[DECISION] Use JWT for authentication - UNLOCKED")
    assert Decision.objects.get(session=chat_session).locked
