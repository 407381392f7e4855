"""Dynamic Budget Calculation"""

from __future__ import annotations

import itertools

import pytest
from django.test import Client

from chat.models import Checkpoint
from chat.selectors.context import active_checkpoints, session_budget
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.compression import compression_run
from chat.services.messages import message_create
from chat.services.sessions import session_create
from engine.core.ledger import memory_budget
from engine.resources import context_profiles, count_text_tokens
from tests.factories import WRITER_SIZE_B, compress_with_model_summaries, event_types, small_session, until_due

pytestmark = pytest.mark.django_db


def test_available_budget_formula(user, gateway, fake_ollama, embedded_backend):
    """Spec: "Available Budget = ollama_context_size - system_prompt_tokens - checkpoint_tokens".

    After each of three compressions the session's budget (the API's, the selector's) is its Ollama size less
    its system prompt and the checkpoints stored in its active context."""
    session = small_session(
        user, parameter_size_b=WRITER_SIZE_B, system_prompt="You are a careful assistant for the onboarding project."
    )
    client = Client()
    client.force_login(user)
    turn = 0
    for _ in range(3):
        turn = until_due(session, start=turn)
        compress_with_model_summaries(session, gateway, fake_ollama, embedded_backend.count_texts_tokens)
        session.refresh_from_db()
        checkpoints = [cp.current_tokens for cp in active_checkpoints(session=session)]
        expected = session.max_tokens - session.system_prompt_tokens - sum(checkpoints)
        budget = session_budget(session=session)
        assert session.system_prompt_tokens > 0
        assert budget.checkpoint_tokens == sum(checkpoints) > 0
        assert budget.available == expected
        context = client.get(f"/api/sessions/{session.pk}/context").json()
        assert (context["available"], context["checkpoint_tokens"]) == (expected, sum(checkpoints))
    assert len(checkpoints) == 3


def _spec_example(user, checkpoints: list[int]):
    """The spec's worked example as a stored session: a 16K session (13,600 tokens) whose system prompt is
    1,000 tokens, with checkpoints of ``checkpoints`` tokens, oldest first."""
    system_prompt = " ".join(["word"] * 1000)
    assert count_text_tokens(system_prompt) == 1_000
    session = session_create(owner=user, model="llama3.2:3b", context_size=16_384, system_prompt=system_prompt)
    for number, tokens in enumerate(checkpoints, start=1):
        Checkpoint.objects.create(
            session=session,
            number=number,
            level=3 - (len(checkpoints) - number),
            summary=f"Checkpoint {number}.",
            original_tokens=tokens * 2,
            current_tokens=tokens,
        )
    return session


def test_sixteen_k_is_13600_tokens_tier_3(user):
    """Spec: "Ollama enforces a fixed context limit (e.g., 13,600 tokens for 16K selection)." and
    "Example: 16K Context (Tier 3)"."""
    session = session_create(owner=user, model="llama3.2:3b", context_size=16_384)
    assert session.max_tokens == 13_600
    assert session.profile.tier.number == 3
    assert session.profile.tier.label == "Tier 3 Standard"
    assert session_budget(session=session).max_tokens == 13_600


def test_tier_table():
    """Spec: "Ollama enforces a fixed context limit (e.g., 13,600 tokens for 16K selection)."

    The whole tier table as docs/configuration.md states it (sizes, Ollama sizes, tiers, checkpoints kept)."""
    table = {p.label: (p.ollama_context_size, p.tier.number, p.tier.max_checkpoints) for p in context_profiles()}
    assert table == {
        "2K": (1_700, 1, 0),
        "4K": (3_400, 1, 0),
        "8K": (6_800, 2, 3),
        "16K": (13_600, 3, 3),
        "32K": (27_200, 4, 10),
        "64K": (54_400, 5, 15),
        "128K": (108_800, 5, 15),
    }
    # 85% of the nominal size in thousands: 16K -> 16,000 x 0.85 = 13,600.
    assert all(p.ollama_context_size == p.size // 1024 * 850 for p in context_profiles())


@pytest.mark.parametrize(
    ("box", "checkpoints", "available", "trigger"),
    [
        ("Initial State", [], 12_600, 10_080),
        ("After 2nd Compression", [600, 1_200], 10_800, 8_640),
        ("After 3rd Compression", [300, 600, 1_200], 10_500, 8_400),
    ],
)
def test_worked_example(box, checkpoints, available, trigger, user):
    """Spec: "Ollama: 13,600 tokens FIXED", "System Prompt: 1,000 tokens", then per box the available
    budget and "Trigger at: ... 80%" (12,600/10,080; 10,800/8,640; 10,500/8,400)."""
    session = _spec_example(user, checkpoints)
    budget = session_budget(session=session)
    assert (budget.available, budget.trigger_at) == (available, trigger), box


def test_worked_example_first_compression_box_follows_the_formula(user):
    """Spec: "Checkpoint 1: 1,200 tokens", "Available: 10,400 tokens", "Trigger at: 8,320 tokens 80%".

    Differs, see docs/conformance.md: "The worked example's first box" — the formula gives 11,400 / 9,120,
    which is what the product computes."""
    budget = session_budget(session=_spec_example(user, [1_200]))
    assert (budget.available, budget.trigger_at) == (11_400, 9_120)
    assert (budget.available, budget.trigger_at) != (10_400, 8_320)


def test_available_budget_shrinks_with_each_checkpoint(user, gateway, fake_ollama, embedded_backend):
    """Spec: "Available budget shrinks with each checkpoint, but aging keeps it sustainable for 3-5+ compressions."

    Four compressions whose summaries the model writes at the same size: each new checkpoint takes budget, but
    as the older ones age each later compression takes less than the first did."""
    session = small_session(user, parameter_size_b=WRITER_SIZE_B, compression={"summary_max_tokens": 240})
    available = [session_budget(session=session).available]
    turn = 0
    for _ in range(4):
        turn = until_due(session, start=turn)
        compress_with_model_summaries(session, gateway, fake_ollama, embedded_backend.count_texts_tokens)
        available.append(session_budget(session=session).available)
    costs = [before - after for before, after in itertools.pairwise(available)]
    # Each takes budget until the oldest merge into the ultra checkpoint, which is fitted to what the memory
    # share leaves and may give some back (see docs/conformance.md, "Memory share").
    assert all(cost > 0 for cost in costs[:3]), f"each checkpoint takes budget: {costs}"
    assert all(cost < costs[0] for cost in costs[1:]), f"aging makes each later one cost less: {costs}"
    assert costs[-1] < costs[1], f"{costs}"


def test_available_budget_recalculated_after_each_compression(chat_session):
    """Spec: "Available budget recalculated after each compression" and "Accounts for system prompt and checkpoints"."""
    for index in range(4):
        message_create(session=chat_session, role="user", content=f"Question {index}?")
        message_create(session=chat_session, role="assistant", content="A long answer about the topic. " * 20)
    before = session_budget(session=chat_session)
    assert before.system_prompt_tokens == chat_session.system_prompt_tokens > 0
    assert before.available == chat_session.max_tokens - chat_session.system_prompt_tokens
    replies = list(chat_session.messages.filter(role="assistant").values_list("id", flat=True))
    checkpoint = compression_commit(
        session=chat_session, message_ids=replies[:2], draft=CheckpointDraft(summary="Two answers about the topic.")
    )
    after = session_budget(session=chat_session)
    assert after.checkpoint_tokens == checkpoint.current_tokens > 0
    assert after.available == before.available - checkpoint.current_tokens
    assert after.trigger_at < before.trigger_at


def test_conversation_sustains_five_compressions(user, gateway, fake_ollama):
    """Spec: "With dynamic budget tracking:" "Compression triggers based on available space",
    "Checkpoints age and compress further" and "Conversation sustains 3-5+ compressions"."""
    fake_ollama.behaviour.canned_reply = "A recap of the earlier answers: " + " ".join(
        f"answer {n} explained the idea again." for n in range(1, 9)
    )
    session = small_session(user)
    initial = session_budget(session=session)
    turn = 0
    available = []
    for _ in range(5):
        turn = until_due(session, start=turn)
        assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
        budget = session_budget(session=session)
        assert not budget.compression_due
        available.append(budget.available)
    assert event_types(session).count("rollover-complete") == 0
    assert event_types(session).count("checkpoint-aged") >= 6
    # Aging keeps the checkpoints within the tier's memory share: after five compressions the rest of the budget
    # is still free for talk (see docs/conformance.md, "Memory share").
    memory = memory_budget(max_tokens=session.max_tokens, tier=session.profile.tier)
    assert min(available) > initial.available - memory
