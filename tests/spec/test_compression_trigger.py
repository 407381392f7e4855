"""Compression Trigger"""

from __future__ import annotations

import pytest

from chat.services import message_create
from contextmgr.core.budget import COMPRESSION_TRIGGER_RATIO, Budget
from contextmgr.selectors import session_budget
from contextmgr.services.compression import compression_maybe_schedule, compression_run
from tests.factories import event_types, small_session, until_due


@pytest.mark.parametrize(
    ("max_tokens", "system", "checkpoints"), [(13_600, 1_000, 0), (13_600, 1_000, 2_100), (1_700, 37, 0)]
)
def test_trigger_is_80_percent_of_available(max_tokens, system, checkpoints):
    """Spec: "Compression is triggered at **80% of available context budget**."
    and "const compressionTrigger = availableBudget * 0.8;"."""
    budget = Budget(max_tokens=max_tokens, system_prompt_tokens=system, checkpoint_tokens=checkpoints, active_tokens=0)
    assert float(COMPRESSION_TRIGGER_RATIO) == 0.8
    assert budget.trigger_at == int((max_tokens - system - checkpoints) * 8 // 10)


def test_due_at_80_percent_not_below():
    """Spec: "alt Usage < 80%" -> "Continue normally"; "else Usage >= 80%" -> "Trigger compression"."""

    def budget(active: int) -> Budget:
        return Budget(max_tokens=13_600, system_prompt_tokens=1_000, checkpoint_tokens=0, active_tokens=active)

    assert not budget(10_079).compression_due
    assert budget(10_080).compression_due
    assert budget(12_000).compression_due


def test_trigger_excludes_system_and_checkpoints():
    """Spec: "// Calculate available budget (excludes system + checkpoints)" and
    "// Trigger compression at 80% of AVAILABLE budget"."""
    without = Budget(max_tokens=13_600, system_prompt_tokens=1_000, checkpoint_tokens=0, active_tokens=9_000)
    with_checkpoints = Budget(
        max_tokens=13_600, system_prompt_tokens=1_000, checkpoint_tokens=2_000, active_tokens=9_000
    )
    # 9,000 is below 80% of 12,600 but above 80% of 10,600: the checkpoints moved the trigger.
    assert not without.compression_due
    assert with_checkpoints.compression_due
    assert with_checkpoints.trigger_at == 8_480


@pytest.mark.django_db
def test_message_store_triggers_compression_at_threshold(user, django_capture_on_commit_callbacks):
    """Spec: "Store->>Store: Check usage", then "alt Usage < 80%": "Continue normally",
    "else Usage >= 80%": "Store->>Coord: Trigger compression"."""
    session = small_session(user)
    index = 0
    with django_capture_on_commit_callbacks() as callbacks:
        while not session_budget(session=session).compression_due:
            assert not compression_maybe_schedule(session=session), "scheduled below 80%"
            message_create(session=session, role="user", content=f"Question {index}?")
            message_create(session=session, role="assistant", content="An answer that goes on for a while. " * 12)
            index += 1
    assert callbacks == []
    with django_capture_on_commit_callbacks() as callbacks:
        assert compression_maybe_schedule(session=session)
    scheduled = [c for c in callbacks if c.__qualname__.startswith("compression_schedule")]
    assert len(scheduled) == 1, "one background compression is scheduled"


@pytest.mark.django_db
def test_below_trigger_is_skipped_and_at_trigger_compressed(user, gateway, fake_ollama):
    """Spec: "alt Usage < 80%": "Store->>User: Continue normally"; "else Usage >= 80%": ...
    "Store->>User: Continue with more space"."""
    fake_ollama.behaviour.canned_reply = "A recap of the answers so far."
    session = small_session(user)
    message_create(session=session, role="user", content="Hello?")
    message_create(session=session, role="assistant", content="Hi. " * 30)
    assert compression_run(session_id=session.pk, gateway=gateway).status == "skipped"
    assert event_types(session) == ["compression-skipped"]
    assert not any(r["path"] == "/api/chat" for r in fake_ollama.behaviour.requests), "no LLM call when not due"

    until_due(session)
    before = session_budget(session=session)
    assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
    after = session_budget(session=session)
    assert after.active_tokens < before.active_tokens
    assert after.active_tokens < after.trigger_at, "continues with more space, below the new trigger"
