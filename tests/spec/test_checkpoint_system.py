"""Checkpoint System"""

from __future__ import annotations

import pytest

from chat.models import Message
from contextmgr.core.aging import CheckpointInfo, Level, level_target, plan_aging
from contextmgr.core.prompts import build_aging_prompt, build_merge_prompt
from contextmgr.models import Checkpoint, ContextEvent
from contextmgr.resources import count_text_tokens
from contextmgr.services.checkpoints import CheckpointDraft, compression_commit
from contextmgr.services.compression import compression_run
from tests.factories import created, event_types, until_due

# Long, and not repetitive (a looping summary is asked for again: tests/integration/test_compression.py).
LONG_SUMMARY = "A recap of the earlier answers: " + " ".join(
    f"answer {n} explained step {n}{suffix}"
    for n, suffix in enumerate(
        (". It was clear.", " with an example.", ", then a caveat.", " and a diagram.", ", briefly.", " in detail."), 1
    )
)


@pytest.mark.django_db
def test_checkpoint_structure(chat_session):
    """Spec: "interface CompressionCheckpoint" with "level: 1 | 2 | 3", "range: string; // Message range
    (e.g., "Messages 1-50")", "originalTokens", "currentTokens", "compressionCount", "compressionNumber",
    "keyDecisions", "filesModified", "nextSteps", "createdAt", "compressedAt?"."""
    from chat.services import message_create

    message_create(session=chat_session, role="user", content="Plan the login?")
    first = message_create(session=chat_session, role="assistant", content="Here is a plan for the login. " * 10)
    message_create(session=chat_session, role="user", content="And the tokens?")
    second = message_create(session=chat_session, role="assistant", content="Tokens are signed and short. " * 10)
    checkpoint = compression_commit(
        session=chat_session,
        message_ids=[first.id, second.id],
        draft=CheckpointDraft(
            summary="Planned the login and its tokens.",
            key_decisions=("Use JWT",),
            files_modified=("src/auth/login.ts",),
            next_steps=("Add refresh tokens",),
        ),
    )
    checkpoint.refresh_from_db()
    assert checkpoint.id is not None
    assert checkpoint.level == 3
    assert checkpoint.range_label == "Messages 2-4"
    assert checkpoint.summary == "Planned the login and its tokens."
    assert checkpoint.created_at is not None
    assert checkpoint.compressed_at is None, "set only when aged"
    assert checkpoint.original_tokens == first.tokens + second.tokens
    assert 0 < checkpoint.current_tokens < checkpoint.original_tokens
    assert checkpoint.compression_count == 1
    assert checkpoint.number == 1
    assert checkpoint.key_decisions == ["Use JWT"]
    assert checkpoint.files_modified == ["src/auth/login.ts"]
    assert checkpoint.next_steps == ["Add refresh tokens"]


def test_new_checkpoint_target_and_aging_shares():
    """Spec: "Target: ~1200 tokens", "Compress to 60%" ~600, "Compress to 50%" ~300, "Compress to 40%" ~150.

    Differs, see docs/conformance.md: "Aging sizes" — the new checkpoint's target is ``summary_max_tokens``
    (1,024 by default): 1,024 -> 614 -> 307 -> 122."""
    assert [level_target(level, 1024) for level in (Level.RECENT, Level.OLD, Level.ANCIENT, Level.ULTRA)] == [
        1024,
        614,
        307,
        122,
    ]


def test_existing_checkpoints_age_one_level_per_compression():
    """Spec: "When a new compression is triggered, existing checkpoints age and compress further:"
    "Checkpoint 3 → Checkpoint 2", "Checkpoint 2 → Checkpoint 1", "Checkpoint 1 → Ultra-compress"."""
    existing = [
        CheckpointInfo(1, Level.ANCIENT, 300),
        CheckpointInfo(2, Level.OLD, 600),
        CheckpointInfo(3, Level.RECENT, 1200),
    ]
    plan = plan_aging(existing, summary_max_tokens=1200, max_checkpoints=10)
    moves = {step.checkpoint_id: (step.from_level, step.to_level, step.target_tokens) for step in plan.steps}
    assert moves[2] == (Level.OLD, Level.ANCIENT, 300), "to 50% of 600"
    assert moves[3] == (Level.RECENT, Level.OLD, 720), "to 60% of 1,200"
    assert plan.merge is not None, "checkpoint 1 becomes the ultra checkpoint"
    assert plan.merge.checkpoint_ids == (1,)
    assert plan.merge.target_tokens == 144, "the ultra target, 40% of the ancient one (360)"
    assert not plan.rollover


def test_checkpoint_manager_merges_old_checkpoints():
    """Spec: "Stores and retrieves checkpoints, ages checkpoints over time,
    merges old checkpoints"."""
    existing = [
        CheckpointInfo(1, Level.ULTRA, 150),
        CheckpointInfo(2, Level.ANCIENT, 300),
        CheckpointInfo(3, Level.OLD, 600),
        CheckpointInfo(4, Level.RECENT, 1200),
    ]
    plan = plan_aging(existing, summary_max_tokens=1200, max_checkpoints=3)
    assert plan.merge is not None
    assert plan.merge.checkpoint_ids == (1, 2), "the ultra checkpoint and the one aging into it merge"
    # A tier that keeps one checkpoint merges the older one as soon as a new one comes.
    small = plan_aging([CheckpointInfo(7, Level.RECENT, 1200)], summary_max_tokens=1200, max_checkpoints=1)
    assert small.merge is not None
    assert small.merge.checkpoint_ids == (7,)


@pytest.mark.django_db
def test_checkpoints_age_through_every_level(due_session, gateway, fake_ollama):
    """Spec: "Coord->>Coord: Create checkpoint", "Coord->>Coord: Age existing checkpoints" and the levels
    "Recent Checkpoint 3", "Old Checkpoint 2", "Ancient Checkpoint 1", "Ultra Merged"."""
    fake_ollama.behaviour.canned_reply = LONG_SUMMARY
    history = []
    turn = 100
    for _ in range(4):
        assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
        first = Checkpoint.objects.get(session=due_session, number=1)
        history.append((first.level, first.current_tokens, count_text_tokens(first.summary), first.compression_count))
        turn = until_due(due_session, start=turn)
    levels = [level for level, *_ in history]
    assert levels == [Level.RECENT, Level.OLD, Level.ANCIENT, Level.ULTRA]
    tokens = [current for _, current, *_ in history]
    assert tokens == sorted(tokens, reverse=True), f"each step smaller: {tokens}"
    assert len(set(tokens)) == 4, f"each step smaller: {tokens}"
    summary_tokens = [summary for _, _, summary, _ in history]
    for before, after in zip(tokens, summary_tokens[1:], strict=False):
        assert after <= before // 2, f"each aging re-summarizes to at most half: {tokens} -> {summary_tokens}"
    assert [count for *_, count in history] == [1, 2, 3, 4], "compressionCount: how many times compressed"
    first = Checkpoint.objects.get(session=due_session, number=1)
    assert first.compressed_at is not None
    assert first.compressed_at > first.created_at
    assert [cp.level for cp in Checkpoint.objects.filter(session=due_session).order_by("number")] == [0, 1, 2, 3]
    aged = ContextEvent.objects.filter(session=due_session, type="checkpoint-aged").order_by("id")
    assert [e.payload["to_level"] for e in aged if e.payload["checkpoint"] == first.id] == [2, 1, 0]
    assert event_types(due_session).count("checkpoint-created") == 4


@pytest.mark.django_db
def test_compression_replaces_messages_with_checkpoint(due_session, gateway, fake_ollama):
    """Spec: "Coord->>Store: Replace messages" — the compressed messages leave the active context for the checkpoint."""
    fake_ollama.behaviour.canned_reply = "A recap of the earlier answers."
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    checkpoint = created(outcome)
    covered = Message.objects.filter(session=due_session, compressed_into=checkpoint).order_by("position")
    assert covered.exists()
    first, last = covered.first(), covered.last()
    assert first is not None
    assert last is not None
    assert checkpoint.range_label == f"Messages {first.position}-{last.position}"
    assert checkpoint.original_tokens == sum(m.tokens for m in covered)


def test_aging_prompts_per_level():
    """Spec: "Old Checkpoint 2": "Moderate summaries", "Main points only", "Code references only";
    "Ancient Checkpoint 1": "Brief summaries", "Critical info only", "No code details";
    "Ultra Merged": "Minimal summary", "Essential context only"."""
    old = build_aging_prompt("S", to_level=Level.OLD, target_tokens=600)
    ancient = build_aging_prompt("S", to_level=Level.ANCIENT, target_tokens=300)
    ultra = build_merge_prompt(["A", "B"], target_tokens=150)
    assert "a moderate summary: main points only, code by reference" in old
    assert "no code bodies" in old
    assert "at most 600 tokens" in old
    assert "a brief summary: critical information only, no code details" in ancient
    assert "at most 300 tokens" in ancient
    assert "a minimal summary: only the essential context needed to continue" in ultra
    assert "at most 150 tokens" in ultra
    with pytest.raises(ValueError, match="never ages into it"):
        build_aging_prompt("S", to_level=Level.RECENT, target_tokens=1200)


@pytest.mark.django_db
def test_aging_asks_the_llm_for_the_next_level(due_session, gateway, fake_ollama):
    """Spec: "Checkpoint 3 → Checkpoint 2" / "Compress to 60%" — the LLM re-summarizes the aging checkpoint."""
    fake_ollama.behaviour.canned_reply = LONG_SUMMARY
    compression_run(session_id=due_session.pk, gateway=gateway)
    until_due(due_session, start=100)
    fake_ollama.behaviour.requests.clear()
    compression_run(session_id=due_session.pk, gateway=gateway)
    prompts = [r["messages"][-1]["content"] for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    assert len(prompts) == 2, "one summary for the new checkpoint, one aging call"
    assert prompts[0].startswith("Summarize the following conversation history")
    assert "a moderate summary: main points only" in prompts[1]
    assert LONG_SUMMARY.strip() in prompts[1], "the aging checkpoint's own summary is what is shortened"
