"""Compression Rules and Never-Compressed Content"""

from __future__ import annotations

import pytest

from chat.models import Checkpoint, ContextEvent, Message
from chat.selectors.context import session_budget, session_window
from chat.services.checkpoints import CheckpointDraft, CompressionConflict, compression_commit
from chat.services.compression import compression_run
from chat.services.goals import artifact_record, decision_record, goal_checkpoint_set, goal_create
from chat.services.messages import message_create
from engine.core.aging import Level
from engine.core.window import chat_messages
from tests.factories import (
    ANSWER,
    SMALL_CONTEXTS,
    WRITER_SIZE_B,
    compress_with_model_summaries,
    created,
    event_types,
    prompt,
    small_session,
    summary_requests,
    until_due,
)

pytestmark = pytest.mark.django_db

SUMMARY = "A recap of the earlier answers: " + "the idea was explained step by step and recapped. " * 6


def test_only_assistant_and_tool_output_is_compressed(user, gateway, fake_ollama):
    """Spec: "✅ Compress LLM output only (assistant messages)", "❌ Never compress user messages",
    "❌ Never compress system prompt" and "Tool Outputs" -> "Compress When Needed".

    A conversation of questions, answers and tool results compressed by the service: only answers and tool
    results go into checkpoints, and only they are sent to the model to summarize."""
    fake_ollama.behaviour.canned_reply = "A recap of the catalogue lookups and of the answers about them."
    session = small_session(user, parameter_size_b=WRITER_SIZE_B)  # a model that is asked to summarize
    index = 0
    while not session_budget(session=session).compression_due:
        message_create(session=session, role="user", content=f"Please look up entry {index} of the catalogue?")
        message_create(
            session=session,
            role="tool",
            content="The catalogue entry describes an old harbour crane and its restoration. " * 3,
            tool_call_id=f"call_{index}",
            tool_name="lookup",
            tool_args={"entry": index},
        )
        message_create(session=session, role="assistant", content=ANSWER * 2)
        index += 1
    assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
    compressed = Message.objects.filter(session=session, compressed_into__isnull=False)
    assert {m.role for m in compressed} == {"assistant", "tool"}
    assert not Message.objects.filter(session=session, role="user", compressed_into__isnull=False).exists()
    (asked,) = [r["messages"][-1]["content"] for r in summary_requests(fake_ollama)]
    assert "harbour crane" in asked
    assert "catalogue?" not in asked, "no user message is sent to be summarized"
    assert "Be brief." not in asked, "nor the system prompt"
    role, head = prompt(session)[0]
    assert (role, head.split("\n")[0]) == ("system", "Be brief."), "the system prompt, as written"


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


def test_each_aging_step_compresses_more_aggressively(user, gateway, fake_ollama, embedded_backend):
    """Spec: "✅ Each aging step compresses more aggressively", with the levels "Recent Checkpoint 3" "50-70%
    compression", "Old Checkpoint 2" "60% compression", "Ancient Checkpoint 1" "70% compression", "Ultra Merged"
    "80% compression".

    The first checkpoint, through four compressions whose summaries the model writes: each step's target is
    smaller than the one before, and each version keeps a smaller share of the tokens it stands for."""
    session = small_session(user, parameter_size_b=WRITER_SIZE_B, compression={"summary_max_tokens": 240})
    turn = 0
    for _ in range(4):
        turn = until_due(session, start=turn)
        compress_with_model_summaries(session, gateway, fake_ollama, embedded_backend.count_texts_tokens)
    first = Checkpoint.objects.get(session=session, number=1)
    steps = [
        e.payload
        for e in ContextEvent.objects.filter(session=session, type="checkpoint-aged").order_by("id")
        if e.payload["checkpoint"] == first.id
    ]
    assert [(s["to_level"], s["how"]) for s in steps] == [(2, "summarize"), (1, "summarize"), (0, "summarize")]
    targets = [s["target_tokens"] for s in steps]
    assert targets == sorted(targets, reverse=True)
    assert len(set(targets)) == 3, f"each target smaller: {targets}"
    kept = [r.tokens / first.original_tokens for r in first.revisions.order_by("id")]
    assert kept == sorted(kept, reverse=True)
    assert len(set(kept)) == 4, f"each version a smaller share of the original: {kept}"


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
