"""LLM-Based Summarization"""

from __future__ import annotations

import pytest

from chat.models import Checkpoint, ContextEvent, Message
from chat.selectors.context import session_window
from chat.services.compression import compression_run
from engine.core.prompts import PromptMessage, build_summary_prompt
from tests.factories import created, event_types, summary_requests

pytestmark = pytest.mark.django_db


def test_summarization_prompt_text():
    """Spec: "Summarize the following conversation history, preserving key decisions, code changes, and
    important context:" ... "${messagesToCompress.join('\\n')}" ... "Provide a concise summary that maintains
    essential information."."""
    prompt = build_summary_prompt([PromptMessage("assistant", "First answer."), PromptMessage("tool", "Output.")])
    assert prompt.startswith(
        "Summarize the following conversation history, preserving key decisions, code changes, and important context:\n"
    )
    assert "assistant: First answer.\ntool: Output." in prompt
    assert prompt.endswith("Provide a concise summary that maintains essential information.")


def test_the_llm_writes_the_summary(due_session, gateway, fake_ollama):
    """Spec: "**The LLM does the summarization**, not our app." and "4. Stores the summary as a checkpoint"."""
    fake_ollama.behaviour.canned_reply = "Summary written by the model."
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    (request,) = summary_requests(fake_ollama)
    assert request["model"] == due_session.model
    assert created(outcome).summary == "Summary written by the model."


def test_app_sends_the_assistant_messages_with_the_prompt(due_session, gateway, fake_ollama):
    """Spec: "1. Identifies messages to compress" / "2. Sends them to the LLM with a summarization prompt"
    and "Context->>App: Return assistant messages"."""
    fake_ollama.behaviour.canned_reply = "Short recap."
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    (request,) = summary_requests(fake_ollama)
    prompt = request["messages"][-1]["content"]
    assert prompt.startswith("Summarize the following conversation history")
    covered = Message.objects.filter(compressed_into_id=outcome.checkpoint_id)
    for message in covered:
        assert f"assistant: {message.content}" in prompt
    assert "Question number" not in prompt, "user messages are not sent for compression"


def test_original_messages_leave_the_active_context(due_session, gateway, fake_ollama):
    """Spec: "5. Removes the original messages from active context"
    and "App->>Context: Replace messages with checkpoint"."""
    fake_ollama.behaviour.canned_reply = "Short recap."
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    covered = set(Message.objects.filter(compressed_into_id=outcome.checkpoint_id).values_list("id", flat=True))
    window = session_window(session=due_session)
    assert covered
    assert not covered & {b.ref for b in window if b.kind == "message"}
    assert [b.ref for b in window if b.kind == "checkpoint"] == [outcome.checkpoint_id]


def test_tokens_are_counted_and_saved(due_session, gateway, fake_ollama):
    """Spec: "App->>App: Count tokens"
    and "Original: 5000 tokens<br/>Checkpoint: 1200 tokens<br/>Saved: 3800 tokens"."""
    fake_ollama.behaviour.canned_reply = "Short recap."
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    checkpoint = created(outcome)
    assert checkpoint.current_tokens < checkpoint.original_tokens
    payload = ContextEvent.objects.get(session=due_session, type="compressed").payload
    saved = payload["tokens_before"] - payload["tokens_after"]
    assert saved == checkpoint.original_tokens - checkpoint.current_tokens > 0


def test_compression_service_handles_failures(due_session, gateway, fake_ollama):
    """Spec: "Calls LLM for summarization, generates compressed summaries,
    handles compression failures"."""
    fake_ollama.behaviour.fail_status = 500
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert outcome.status == "error"
    assert event_types(due_session)[-1] == "compression-error"
    assert not Checkpoint.objects.filter(session=due_session).exists()
    assert not Message.objects.filter(session=due_session, compressed_into__isnull=False).exists()
