from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.markers import (
    ArtifactRecord,
    CheckpointUpdate,
    DecisionUpdate,
    GoalSet,
    MarkerFacts,
    NextStep,
    SummaryOutput,
    checkpoint_advances,
    marker_facts,
    newest,
    parse_markers,
    split_summary,
)
from engine.core.prompts import GoalCheckpointStatus

SPEC_EXAMPLE = """[GOAL] Implement user authentication system
[CHECKPOINT] Design authentication flow - COMPLETED
[CHECKPOINT] Implement login endpoint - COMPLETED
[CHECKPOINT] Add JWT token generation - IN PROGRESS
[DECISION] Use JWT for authentication - LOCKED
[DECISION] Store tokens in httpOnly cookies - LOCKED
[ARTIFACT] Created src/auth/login.ts
[ARTIFACT] Created src/auth/jwt.ts
[ARTIFACT] Modified src/routes/api.ts
[NEXT] Complete JWT token generation, then move to user registration"""


def test_the_specs_example():
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


def test_case_spacing_bullets_and_emphasis():
    text = """Some prose first.
  - [checkpoint]   Write tests   -   done
* **[Decision]** Use Redis: locked
1. [CHECKPOINT] Deploy — pending
> [ARTIFACT]: modified `docs/README.md`
+ [next] ship it
[CHECKPOINT] Review (in_progress)
[Checkpoint] Plan without a status
[DECISION] Maybe SQLite"""
    assert parse_markers(text) == [
        CheckpointUpdate("Write tests", "completed"),
        DecisionUpdate("Use Redis", locked=True),
        CheckpointUpdate("Deploy", "pending"),
        ArtifactRecord("modified", "docs/README.md"),
        NextStep("ship it"),
        CheckpointUpdate("Review", "in-progress"),
        CheckpointUpdate("Plan without a status", "pending"),
        DecisionUpdate("Maybe SQLite", locked=False),
    ]


def test_unlocked_and_added_variants():
    assert parse_markers("[DECISION] Use gRPC - UNLOCKED\n[ARTIFACT] Added a.py\n[ARTIFACT] Updated b.py") == [
        DecisionUpdate("Use gRPC", locked=False),
        ArtifactRecord("created", "a.py"),
        ArtifactRecord("modified", "b.py"),
    ]


def test_junk_lines_are_ignored():
    junk = """[GOAL]
[NEXT]\t
[ARTIFACT] deleted x.py
[ARTIFACT]
[CHECKPOINT] - COMPLETED
[CHECKPOINT] Something - LOCKED
[DECISION] Something - DONE
[DECISION] - LOCKED
[UNKNOWN] whatever
GOAL without brackets
[GOAL Implement x"""
    assert parse_markers(junk) == []


def test_long_lines_are_prose_and_descriptions_are_capped():
    assert parse_markers("[GOAL] " + "x" * 2000) == []
    (goal,) = parse_markers("[GOAL] " + "y" * 900)
    assert isinstance(goal, GoalSet)
    assert len(goal.description) == 500


def test_nul_bytes_are_dropped():
    assert parse_markers("[GOAL] Ship\x00 it") == [GoalSet("Ship it")]


def test_one_megabyte_of_hostile_text():
    hostile = ("[CHECKPOINT] " + " - " * 300 + "\n") * 1000 + "[DECISION] " + "(" * 900
    updates = parse_markers(hostile)
    assert len(updates) == 1001
    assert all(isinstance(u, CheckpointUpdate | DecisionUpdate) for u in updates)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_any_unicode(text):
    parse_markers(text)
    parse_markers("[DECISION] " + text + " - LOCKED")


@settings(max_examples=100, deadline=None)
@given(
    st.text(
        alphabet=st.characters(
            blacklist_categories=["Cc", "Cs", "Zl", "Zp"], blacklist_characters="[]`*_-–—:|()'\"\x85\x1c\x1d\x1e"
        ),
        min_size=1,
        max_size=60,
    ).filter(lambda s: s.strip() and not s.strip()[0].isdigit())
)
def test_a_locked_decision_round_trips(description):
    (update,) = parse_markers(f"[DECISION] {description} - LOCKED")
    assert update == DecisionUpdate(" ".join(description.split()), locked=True)


def test_marker_facts_collect_decisions_paths_and_next_steps_once():
    facts = marker_facts(
        [SPEC_EXAMPLE, "[ARTIFACT] Modified src/routes/api.ts\n[DECISION] Use JWT for authentication - LOCKED"]
    )
    assert facts == MarkerFacts(
        key_decisions=("Use JWT for authentication", "Store tokens in httpOnly cookies"),
        files_modified=("src/auth/login.ts", "src/auth/jwt.ts", "src/routes/api.ts"),
        next_steps=("Complete JWT token generation, then move to user registration",),
    )


def test_split_summary_keeps_the_prose_and_reads_the_marker_lines():
    output = split_summary(
        "Built the login.\n[CHECKPOINT] Login - COMPLETED\nTokens next.\n[DECISION] Use JWT - LOCKED\n"
        "[ARTIFACT] Modified src/app.py\n[NEXT] Add refresh tokens\n[GOAL] Something else"
    )
    assert output.prose == "Built the login.\nTokens next."
    assert output.checkpoints == (CheckpointUpdate("Login", "completed"),)
    assert output.decisions == (DecisionUpdate("Use JWT", locked=True),)
    assert output.artifacts == (ArtifactRecord("modified", "src/app.py"),)
    assert output.next_steps == ("Add refresh tokens",)


def test_split_summary_drops_copied_placeholders_and_keeps_a_markers_only_text():
    output = split_summary("[CHECKPOINT] <checkpoint> - COMPLETED\n[DECISION] <decision>\n[ARTIFACT] Created <path>")
    assert (output.checkpoints, output.decisions, output.artifacts) == ((), (), ())
    assert output.prose.startswith("[CHECKPOINT] <checkpoint>"), "nothing else left: the text stays whole"
    assert split_summary("Just prose.") == SummaryOutput("Just prose.")


def test_checkpoint_advances_only_forward_on_known_checkpoints():
    stored: dict[str, GoalCheckpointStatus] = {"Design": "completed", "Build": "in-progress", "Ship": "pending"}
    updates = [
        CheckpointUpdate("design", "in-progress"),  # back: ignored
        CheckpointUpdate("BUILD", "completed"),
        CheckpointUpdate("ship", "in-progress"),
        CheckpointUpdate("Ship", "pending"),  # the furthest of the two counts
        CheckpointUpdate("Invented", "completed"),
    ]
    assert checkpoint_advances(updates, stored) == (
        CheckpointUpdate("Build", "completed"),
        CheckpointUpdate("Ship", "in-progress"),
    )
    assert checkpoint_advances([CheckpointUpdate("Build", "in-progress")], stored) == ()


def test_newest_keeps_the_last_ones_each_once_in_order():
    assert newest(["a", "b", "a", "c", "d"], 2) == ("c", "d")
    assert newest(["a", "b"], 5) == ("a", "b")
    assert newest([], 3) == ()
