"""Compression Rules and Never-Compressed Content"""

from __future__ import annotations

import pytest

from chat.models import Message
from chat.services import message_create
from contextmgr.core.aging import Level, level_target
from contextmgr.core.selection import ContextMessage, select_for_compression
from contextmgr.core.window import chat_messages
from contextmgr.models import Checkpoint
from contextmgr.selectors import session_budget, session_window
from contextmgr.services.checkpoints import CheckpointDraft, CompressionConflict, compression_commit
from contextmgr.services.compression import compression_run
from contextmgr.services.goals import artifact_record, decision_record, goal_checkpoint_set, goal_create
from tests.factories import SMALL_CONTEXTS, created, event_types, small_session, until_due

pytestmark = pytest.mark.django_db

SUMMARY = "A recap of the earlier answers: " + "the idea was explained step by step and recapped. " * 6


def test_only_assistant_and_tool_output_is_selected():
    """Spec: "✅ Compress LLM output only (assistant messages)", "❌ Never compress user messages",
    "❌ Never compress system prompt" and "Tool Outputs" -> "Compress When Needed"."""
    messages = [
        ContextMessage(1, "system", 50),
        ContextMessage(2, "user", 40),
        ContextMessage(3, "assistant", 300),
        ContextMessage(4, "tool", 200, group="call_1"),
        ContextMessage(5, "user", 40),
        ContextMessage(6, "assistant", 300),
        ContextMessage(7, "user", 40),
        ContextMessage(8, "assistant", 100),
    ]
    selection = select_for_compression(messages, preserve_recent=150)
    assert selection.message_ids == (3, 4, 6)
    assert selection.tokens == 800


def test_user_messages_are_refused_by_the_commit(chat_session):
    """Spec: "❌ Never compress user messages"."""
    question = message_create(session=chat_session, role="user", content="A question?")
    with pytest.raises(CompressionConflict):
        compression_commit(session=chat_session, message_ids=[question.id], draft=CheckpointDraft(summary="x"))
    assert not Checkpoint.objects.exists()


def test_never_compressed_content_survives_verbatim(user, gateway, fake_ollama):
    """Spec: "❌ Never compress system prompt", "❌ Never compress goals or architecture decisions",
    "❌ Never compress active goal checkpoints", "❌ Never compress locked decisions",
    "❌ Never compress user messages"."""
    fake_ollama.behaviour.canned_reply = SUMMARY
    system_prompt = "You are a careful assistant for the login project."
    session = small_session(user, system_prompt=system_prompt)
    goal = goal_create(session=session, description="Ship secure logins", priority="high")
    goal_checkpoint_set(goal=goal, description="Design the flow", status="completed")
    goal_checkpoint_set(goal=goal, description="Write the endpoint", status="in-progress")
    goal_checkpoint_set(goal=goal, description="Add rate limits", status="pending")
    decision_record(
        session=session, description="Architecture: one service per bounded context", locked=True, goal=goal
    )
    artifact_record(session=session, path="src/auth/login.ts", action="created", goal=goal)
    turn = until_due(session)
    questions = list(Message.objects.filter(session=session, role="user").values_list("content", flat=True))
    head_before = chat_messages(session_window(session=session))[0][1]
    for _ in range(2):
        assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
        turn = until_due(session, start=turn)
        questions = list(Message.objects.filter(session=session, role="user").values_list("content", flat=True))
    prompt = chat_messages(session_window(session=session))
    head = prompt[0][1]
    assert head.startswith(system_prompt)
    assert head.startswith(head_before), "system prompt and goal block, unchanged, then the checkpoints"
    for text in (
        "ACTIVE GOAL: Ship secure logins",
        "✅ Design the flow",
        "🔄 Write the endpoint",
        "⏳ Add rate limits",
        "🔒 Architecture: one service per bounded context",
        "Created src/auth/login.ts",
    ):
        assert text in head
    assert [content for role, content in prompt if role == "user"] == questions
    assert not Message.objects.filter(session=session, role="user", compressed_into__isnull=False).exists()


def test_each_aging_step_compresses_more_aggressively():
    """Spec: "✅ Each aging step compresses more aggressively" and "✅ Oldest checkpoints are most compressed"."""
    targets = [level_target(level, 1024) for level in (Level.RECENT, Level.OLD, Level.ANCIENT, Level.ULTRA)]
    assert targets == sorted(targets, reverse=True)
    assert len(set(targets)) == 4


def test_oldest_checkpoints_are_most_compressed(due_session, gateway, fake_ollama):
    """Spec: "✅ Oldest checkpoints are most compressed" and "[Checkpoint 1] - 300 tokens (ancient, 70% compressed)",
    "[Checkpoint 2] - 600 tokens (old, 60% compressed)", "[Checkpoint 3] - 1200 tokens (recent, 50-70% compressed)"."""
    fake_ollama.behaviour.canned_reply = SUMMARY
    turn = 100
    for _ in range(3):
        assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
        turn = until_due(due_session, start=turn)
    checkpoints = list(Checkpoint.objects.filter(session=due_session).order_by("number"))
    assert [cp.level for cp in checkpoints] == [Level.ANCIENT, Level.OLD, Level.RECENT]
    tokens = [cp.current_tokens for cp in checkpoints]
    assert tokens[0] < tokens[1] < tokens[2]
    ratios = [cp.current_tokens / cp.original_tokens for cp in checkpoints]
    assert ratios[0] < ratios[1] < ratios[2] < 1


def test_example_context_structure_order(due_session, gateway, fake_ollama):
    """Spec: "[System Prompt] - 1000 tokens (never compressed)", then "[Checkpoint 1]" ... "[Checkpoint 3]",
    then "[User Messages]" and "[Recent Assistant Messages] - 7500 tokens (not yet compressed)".

    Differs, see docs/conformance.md: "Checkpoints live in the system message" — the blocks are kept in this order and
    the system prompt and checkpoints travel as the one system message."""
    fake_ollama.behaviour.canned_reply = SUMMARY
    turn = 100
    for _ in range(2):
        compression_run(session_id=due_session.pk, gateway=gateway)
        turn = until_due(due_session, start=turn)
    blocks = session_window(session=due_session)
    kinds = [b.kind for b in blocks]
    assert kinds[0] == "system"
    assert kinds[1:3] == ["checkpoint", "checkpoint"]
    assert set(kinds[3:]) == {"message"}
    numbers = dict(Checkpoint.objects.filter(session=due_session).values_list("id", "number"))
    assert [numbers[b.ref] for b in blocks[1:3] if b.ref is not None] == [1, 2], "oldest first"
    sent = chat_messages(blocks)
    assert sent[0][0] == "system"
    assert blocks[0].content in sent[0][1]
    assert blocks[1].content in sent[0][1]
    assert {role for role, _ in sent[1:]} == {"user", "assistant"}


def test_rollover_moves_user_messages_but_keeps_them_in_history(user, gateway, fake_ollama):
    """Spec: "❌ Never compress user messages" and "Orchestrates compression strategies, manages checkpoint aging,
    handles context rollover".

    Differs, see docs/conformance.md: "Rollover" — when the never-compressed part alone is at or over the trigger, the
    oldest user messages move behind an ultra checkpoint; they stay verbatim in the full history."""
    from django.test import override_settings

    fake_ollama.behaviour.canned_reply = "A recap of the conversation so far."
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL_CONTEXTS):
        session = small_session(user, context_size=4096)
    assert session.profile.tier.rolls_over
    index = 0
    while not session_budget(session=session).compression_due:
        message_create(session=session, role="user", content=f"Here is a long note number {index}. " * 12)
        message_create(session=session, role="assistant", content="Noted.")
        index += 1
    history = list(Message.objects.filter(session=session).values_list("id", "content"))
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "rolled-over"
    assert created(outcome).level == Level.ULTRA
    moved = Message.objects.filter(session=session, compressed_into_id=outcome.checkpoint_id)
    assert moved.filter(role="user").exists()
    assert list(Message.objects.filter(session=session).values_list("id", "content")) == history
    assert event_types(session)[-1] == "rollover-complete"


def test_a_tier_one_rollover_takes_assistant_output_before_any_user_message(user, gateway, fake_ollama):
    """Spec: "❌ Never compress user messages". Tier 1 rolls over on every compression, but while
    the user messages alone are under the trigger it takes assistant output only (docs/conformance.md, "Rollover")."""
    from django.test import override_settings

    fake_ollama.behaviour.canned_reply = "A recap of the conversation so far."
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL_CONTEXTS):
        session = small_session(user, context_size=4096)
    until_due(session)
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "rolled-over"
    moved = Message.objects.filter(session=session, compressed_into_id=outcome.checkpoint_id)
    assert moved.exists()
    assert not moved.filter(role="user").exists()
    assert Message.objects.filter(session=session, role="user", compressed_into__isnull=True).count() > 1
