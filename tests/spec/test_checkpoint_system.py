"""Checkpoint System"""

from __future__ import annotations

import pytest

from chat.models import Checkpoint, ContextEvent, Message
from chat.selectors.context import active_checkpoints
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.compression import compression_run, session_effective_limits
from engine.core.aging import Level
from engine.core.prompts import build_aging_prompt, build_merge_prompt
from tests.factories import (
    WRITER_SIZE_B,
    compress_with_model_summaries,
    created,
    event_types,
    small_session,
    spec_aging_target,
    until_due,
)

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
    from chat.services.messages import message_create

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


def _aged_events(session, after_event: int) -> list[ContextEvent]:
    return list(ContextEvent.objects.filter(session=session, type="checkpoint-aged", id__gt=after_event).order_by("id"))


@pytest.mark.django_db
def test_aged_summaries_are_written_by_the_model_at_every_level(user, gateway, fake_ollama, embedded_backend):
    """Spec: "When a new compression is triggered, existing checkpoints age and compress further:"
    "Checkpoint 3 → Checkpoint 2" "Compress to 60%", "Checkpoint 2 → Checkpoint 1" "Compress to 50%",
    "Checkpoint 1 → Ultra-compress" "Compress to 40%", and "summary: Message; // LLM-generated summary".

    Each step's summary is the model's own text, accepted as written (``how`` "summarize", not an
    extract), within the target the aging gave it: 60%, 50% and 40% of the checkpoint's size, capped by
    the level's share of the summary size (``tests.factories.spec_aging_target``)."""
    session = small_session(user, parameter_size_b=WRITER_SIZE_B, compression={"summary_max_tokens": 240})
    summary_max = session_effective_limits(session).summary_max_tokens
    turn = 0
    for compression in range(1, 5):
        turn = until_due(session, start=turn)
        written = compress_with_model_summaries(session, gateway, fake_ollama, embedded_backend.count_texts_tokens)
        compressed = ContextEvent.objects.filter(session=session, type="compressed").latest("id").payload
        assert compressed["how"] == "summarize"
        new = Checkpoint.objects.get(session=session, number=compression)
        assert new.summary == written.new, "the new checkpoint's summary is the model's text"
        events = _aged_events(session, written.after_event)
        assert sorted(e.payload["checkpoint"] for e in events) == sorted(written.aged), "every older checkpoint aged"
        for event in events:
            step = event.payload
            assert step["how"] == "summarize", f"the model's summary was not accepted: {step}"
            assert step["from_level"] - step["to_level"] == 1, f"one level per compression: {step}"
            aged = Checkpoint.objects.get(pk=step["checkpoint"])
            assert aged.level == step["to_level"]
            assert aged.summary == written.aged[aged.id], "the stored summary is the model's text"
            revision = aged.revisions.latest("id")
            assert (revision.summary, revision.level, revision.tokens) == (
                written.aged[aged.id],
                step["to_level"],
                step["tokens_after"],
            )
            expected = spec_aging_target(step["to_level"], step["tokens_before"], summary_max)
            assert abs(step["target_tokens"] - expected) <= 1, (
                f"aging to level {step['to_level']}: target {step['target_tokens']} for {step['tokens_before']} "
                f"tokens, the spec's ratios give {expected:.1f}"
            )
            assert embedded_backend.count_text_tokens(aged.summary) <= step["target_tokens"]
            assert step["tokens_after"] < step["tokens_before"]
    first = Checkpoint.objects.get(session=session, number=1)
    revisions = list(first.revisions.order_by("id"))
    assert [(r.reason, r.level) for r in revisions] == [
        ("created", Level.RECENT),
        ("aged", Level.OLD),
        ("aged", Level.ANCIENT),
        ("merged", Level.ULTRA),
    ], "Recent Checkpoint 3, Old Checkpoint 2, Ancient Checkpoint 1, Ultra Merged"
    tokens = [r.tokens for r in revisions]
    assert tokens == sorted(tokens, reverse=True)
    assert len(set(tokens)) == 4, f"each step smaller: {tokens}"
    assert first.compression_count == 4, "compressionCount: how many times compressed"
    assert first.compressed_at is not None
    assert first.compressed_at > first.created_at
    assert [cp.level for cp in active_checkpoints(session=session)] == [0, 1, 2, 3]
    assert event_types(session).count("checkpoint-created") == 4


@pytest.mark.django_db
def test_checkpoint_manager_merges_old_checkpoints(user, gateway, fake_ollama, embedded_backend):
    """Spec: "Stores and retrieves checkpoints, ages checkpoints over time, merges old checkpoints" and
    "Ultra Merged": once one is ultra, the next checkpoint to age into it merges with it; one ultra
    checkpoint carries both, summarized by the model."""
    session = small_session(user, parameter_size_b=WRITER_SIZE_B, compression={"summary_max_tokens": 240})
    turn = 0
    for _ in range(4):
        turn = until_due(session, start=turn)
        compress_with_model_summaries(session, gateway, fake_ollama, embedded_backend.count_texts_tokens)
    ultra, ancient = list(active_checkpoints(session=session))[:2]
    assert (ultra.level, ancient.level) == (Level.ULTRA, Level.ANCIENT)
    until_due(session, start=turn)
    written = compress_with_model_summaries(session, gateway, fake_ollama, embedded_backend.count_texts_tokens)
    merge = next(e.payload for e in _aged_events(session, written.after_event) if "merged" in e.payload)
    assert merge["merged"] == [ultra.id, ancient.id]
    assert merge["how"] == "summarize"
    first, last = ultra.first_position, ancient.last_position
    ultra.refresh_from_db()
    ancient.refresh_from_db()
    assert ancient.merged_into_id == ultra.id
    assert ultra.summary == written.aged[ultra.id]
    assert (ultra.first_position, ultra.last_position) == (first, last), "one range for both"
    active = list(active_checkpoints(session=session))
    assert [cp.level for cp in active] == [Level.ULTRA, Level.ANCIENT, Level.OLD, Level.RECENT]
    assert sum(cp.level != Level.ULTRA for cp in active) <= session.profile.tier.max_checkpoints


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
