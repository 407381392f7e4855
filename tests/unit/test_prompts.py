from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.aging import Level
from engine.core.prompts import (
    FACTS_REQUEST,
    INJECTION_GUARD,
    SUMMARY_MARKERS_REQUEST,
    ArtifactView,
    DecisionView,
    GoalCheckpointView,
    GoalView,
    PromptMessage,
    build_aging_prompt,
    build_goal_summary_prompt,
    build_merge_prompt,
    build_summary_prompt,
    format_history,
    latest_artifacts,
    render_pinned_block,
    strip_scaffolding,
)

ARTIFACTS = (ArtifactView("created", "src/auth/login.ts"), ArtifactView("modified", "src/routes/api.ts"))
MESSAGES = [PromptMessage("assistant", "We chose JWT."), PromptMessage("tool", "read_file -> ok")]
GOAL = GoalView(
    description="Implement user authentication system",
    priority="high",
    status="active",
    checkpoints=(
        GoalCheckpointView("Design authentication flow", "completed"),
        GoalCheckpointView("Add JWT token generation", "in-progress"),
        GoalCheckpointView("User registration", "pending"),
    ),
    decisions=(DecisionView("Use JWT for authentication", True), DecisionView("Maybe Redis", False)),
    next_step="Complete JWT token generation",
)


def test_plain_prompt_is_the_specs_with_the_guard():
    prompt = build_summary_prompt(MESSAGES)
    assert prompt.startswith(
        "Summarize the following conversation history, preserving key decisions, code changes, and important context:\n"
    )
    assert INJECTION_GUARD in prompt
    assert "assistant: We chose JWT.\ntool: read_file -> ok" in prompt
    assert prompt.endswith("Provide a concise summary that maintains essential information.")


def test_goal_aware_prompt_lists_progress_and_locked_decisions_only():
    prompt = build_goal_summary_prompt(GOAL, MESSAGES)
    assert prompt.startswith("ACTIVE GOAL: Implement user authentication system\nPriority: high\nStatus: active\n")
    assert "COMPLETED CHECKPOINTS:\n✅ Design authentication flow\n" in prompt
    assert "IN PROGRESS:\n🔄 Add JWT token generation\n" in prompt
    assert "PENDING:\n⏳ User registration\n" in prompt
    assert "LOCKED DECISIONS:\n🔒 Use JWT for authentication\n" in prompt
    assert "Maybe Redis" not in prompt
    assert "PRESERVE:\n- Decisions made toward the goal" in prompt
    assert "SUMMARIZE AGGRESSIVELY:\n- Off-topic discussions" in prompt
    assert INJECTION_GUARD in prompt
    assert prompt.index("focusing on progress toward the goal") < prompt.index("assistant: We chose JWT.")
    assert prompt.endswith("essential information for continuing work on the goal.\n\n" + SUMMARY_MARKERS_REQUEST)


@pytest.mark.parametrize(
    ("level", "style"), [(Level.OLD, "moderate"), (Level.ANCIENT, "brief"), (Level.ULTRA, "minimal")]
)
def test_aging_prompts_per_level(level, style):
    prompt = build_aging_prompt("The summary.", to_level=level, target_tokens=300)
    assert style in prompt
    assert "at most 300 tokens" in prompt
    assert INJECTION_GUARD in prompt
    assert "SUMMARY:\nThe summary." in prompt


def test_nothing_ages_into_recent():
    with pytest.raises(ValueError, match="never ages into it"):
        build_aging_prompt("x", to_level=Level.RECENT, target_tokens=10)


def test_merge_prompt_numbers_parts_oldest_first():
    prompt = build_merge_prompt(["first", "second"], target_tokens=128)
    assert prompt.index("PART 1:\nfirst") < prompt.index("PART 2:\nsecond")
    assert "at most 128 tokens" in prompt
    assert INJECTION_GUARD in prompt


def test_pinned_block_with_a_goal():
    assert render_pinned_block(goal=GOAL, locked_decisions=["Use JWT for authentication"], artifacts=ARTIFACTS) == (
        "ACTIVE GOAL: Implement user authentication system\n"
        "Priority: high | Status: active\n"
        "Checkpoints:\n"
        "✅ Design authentication flow\n"
        "🔄 Add JWT token generation\n"
        "⏳ User registration\n"
        "Locked decisions (never change these):\n"
        "🔒 Use JWT for authentication\n"
        "Artifacts:\n"
        "Created src/auth/login.ts\n"
        "Modified src/routes/api.ts\n"
        "Next: Complete JWT token generation"
    )


def test_bare_goal_block():
    bare = render_pinned_block(goal=GoalView("Ship", "low", "paused"), locked_decisions=[], artifacts=[])
    assert bare == "ACTIVE GOAL: Ship\nPriority: low | Status: paused"


def test_artifacts_are_pinned_without_a_goal():
    """An artifact recorded in the side panel belongs to no goal; it is pinned all the same."""
    assert render_pinned_block(goal=None, locked_decisions=["Never use eval()"], artifacts=ARTIFACTS) == (
        "Locked decisions (never change these):\n"
        "🔒 Never use eval()\n"
        "Artifacts:\n"
        "Created src/auth/login.ts\n"
        "Modified src/routes/api.ts"
    )
    assert render_pinned_block(goal=None, locked_decisions=[], artifacts=ARTIFACTS[:1]) == (
        "Artifacts:\nCreated src/auth/login.ts"
    )


def test_nothing_to_pin_is_an_empty_block():
    assert render_pinned_block(goal=None, locked_decisions=[], artifacts=[]) == ""


def test_a_path_recorded_twice_is_pinned_once_with_its_latest_action_where_it_first_appeared():
    recorded = [
        ArtifactView("created", "a.py"),
        ArtifactView("created", "b.py"),
        ArtifactView("modified", "a.py"),
    ]
    assert latest_artifacts(recorded) == (ArtifactView("modified", "a.py"), ArtifactView("created", "b.py"))
    assert render_pinned_block(goal=None, locked_decisions=[], artifacts=recorded).splitlines() == [
        "Artifacts:",
        "Modified a.py",
        "Created b.py",
    ]


@settings(max_examples=100, deadline=None)
@given(st.text(), st.text())
def test_builders_accept_any_unicode(content, description):
    messages = [PromptMessage("assistant", content)]
    goal = GoalView(
        description, "medium", "active", (GoalCheckpointView(content, "pending"),), (DecisionView(content, True),)
    )
    assert content in build_summary_prompt(messages)
    assert description in build_goal_summary_prompt(goal, messages)
    assert content in build_aging_prompt(content, to_level=Level.OLD, target_tokens=10)
    assert content in build_merge_prompt([content], target_tokens=10)
    assert description in render_pinned_block(goal=goal, locked_decisions=[content], artifacts=[])


def test_one_megabyte_message():
    big = "x" * 1_000_000
    assert len(build_summary_prompt([PromptMessage("assistant", big)])) > 1_000_000


def test_the_scaffolding_a_model_echoes_never_reaches_a_checkpoint():
    echoed = f"{INJECTION_GUARD}\nPART 1:\nThe rate is 5e-4.\nPART 2: Batch size 64.\nSUMMARY:\nSummary: done"
    assert strip_scaffolding(echoed) == "The rate is 5e-4.\nBatch size 64.\ndone"
    assert strip_scaffolding("Plain text stays.") == "Plain text stays."


def test_a_model_that_can_summarize_is_asked_for_the_facts_of_any_conversation_with_whom_and_when():
    said = [PromptMessage("user", "We adopted Biscuit last Saturday.", date(2023, 5, 25))]
    plain = build_summary_prompt(said)
    asked = build_summary_prompt(said, facts=True)
    assert FACTS_REQUEST not in plain
    assert asked.endswith(FACTS_REQUEST)
    assert "[25 May 2023] user: We adopted Biscuit last Saturday." in asked
    assert format_history([PromptMessage("assistant", "Hi")]) == "assistant: Hi"
    assert FACTS_REQUEST in build_merge_prompt(["a", "b"], target_tokens=50, facts=True)
    assert FACTS_REQUEST not in build_merge_prompt(["a", "b"], target_tokens=50)
    goal = GoalView(description="Plan the move", priority="high", status="active")
    assert FACTS_REQUEST in build_goal_summary_prompt(goal, said, facts=True)
    assert FACTS_REQUEST not in build_goal_summary_prompt(goal, said)
