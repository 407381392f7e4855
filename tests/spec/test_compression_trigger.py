"""Compression Trigger"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chat.models import Session
from chat.selectors.context import active_checkpoints, active_messages, pinned_block, session_budget
from chat.services.compression import compression_maybe_schedule, compression_run
from chat.services.goals import goal_create
from chat.services.messages import message_create
from engine.resources import count_text_tokens
from tests.factories import converse, event_types, small_session, until_due

pytestmark = pytest.mark.django_db


RECAP = "A recap of the answers so far, with the main points."


def _context(client: Client, session) -> dict[str, Any]:
    """The session's context as the API gives it."""
    response = client.get(f"/api/sessions/{session.pk}/context")
    assert response.status_code == 200
    return dict(response.json())


def _stored_available(session: Session) -> int:
    """The available budget from what is stored: the Ollama size less the system prompt, the goal block and
    the active checkpoints."""
    session.refresh_from_db()
    pinned = pinned_block(session=session)
    checkpoints = sum(cp.current_tokens for cp in active_checkpoints(session=session))
    return (
        session.max_tokens - session.system_prompt_tokens - (count_text_tokens(pinned) if pinned else 0) - checkpoints
    )


def test_trigger_is_80_percent_of_available(user, gateway, fake_ollama):
    """Spec: "Compression is triggered at **80% of available context budget**."
    and "const compressionTrigger = availableBudget * 0.8;"."""
    fake_ollama.behaviour.canned_reply = RECAP
    client = Client()
    client.force_login(user)
    session = small_session(user)
    turn = 0
    for _ in range(3):
        available = _stored_available(session)
        context = _context(client, session)
        assert (context["available"], context["trigger_at"]) == (available, available * 8 // 10)
        turn = until_due(session, start=turn)
        assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
    assert _context(client, session)["trigger_at"] == _stored_available(session) * 8 // 10


def test_due_at_80_percent_not_below(user, django_capture_on_commit_callbacks):
    """Spec: "alt Usage < 80%" -> "Continue normally"; "else Usage >= 80%" -> "Trigger compression".

    Message by message, the store schedules a compression exactly when the active messages reach 80% of the
    available budget, and not one message before."""
    session = small_session(user)
    available = _stored_available(session)
    index = 0
    outcomes = []
    while True:
        active = sum(m.tokens for m in active_messages(session=session))
        with django_capture_on_commit_callbacks():
            scheduled = compression_maybe_schedule(session=session)
        outcomes.append(scheduled)
        assert scheduled == (active >= available * 8 // 10), f"{active} of {available} tokens"
        if scheduled:
            break
        role = "user" if index % 2 == 0 else "assistant"
        message_create(session=session, role=role, content=f"Message {index} of the conversation. " * 6)
        index += 1
        assert index < 400, "never due"
    assert outcomes.count(False) > 10, "continued normally below 80%"


def test_trigger_excludes_system_and_checkpoints(user, gateway, fake_ollama):
    """Spec: "// Calculate available budget (excludes system + checkpoints)" and
    "// Trigger compression at 80% of AVAILABLE budget".

    A goal (part of the system message) and a checkpoint each lower the trigger by 80% of their tokens; the active
    messages do not move it."""
    fake_ollama.behaviour.canned_reply = RECAP
    client = Client()
    client.force_login(user)
    session = small_session(user)
    first = _context(client, session)
    goal_create(session=session, description="Ship the onboarding flow with a short welcome screen")
    with_goal = _context(client, session)
    assert with_goal["goal_tokens"] > 0
    assert with_goal["available"] == first["available"] - with_goal["goal_tokens"]
    assert with_goal["trigger_at"] == with_goal["available"] * 8 // 10 < first["trigger_at"]
    converse(session, 3)
    assert _context(client, session)["trigger_at"] == with_goal["trigger_at"], "messages do not move it"
    until_due(session, start=3)
    assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
    compressed = _context(client, session)
    assert compressed["checkpoint_tokens"] > 0
    assert compressed["available"] == with_goal["available"] - compressed["checkpoint_tokens"]
    assert compressed["trigger_at"] == compressed["available"] * 8 // 10


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
