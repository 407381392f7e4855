"""Session History Storage"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.management import call_command

from chat.models import Message
from chat.selectors.context import session_budget, session_window
from chat.services.compression import compression_run
from chat.services.files import session_file, session_file_import
from chat.services.messages import message_create
from engine.core.window import chat_messages
from tests.factories import until_due

pytestmark = pytest.mark.django_db

# The spec's "Session File Structure", verbatim.
SPEC_SESSION_FILE = json.loads("""
{
  "sessionId": "uuid",
  "startTime": "2026-01-26T10:00:00Z",
  "lastActivity": "2026-01-26T11:30:00Z",
  "model": "llama3.2:3b",
  "provider": "ollama",
  "messages": [
    {
      "role": "user",
      "parts": [{ "type": "text", "text": "..." }],
      "timestamp": "2026-01-26T10:00:00Z"
    },
    {
      "role": "assistant",
      "parts": [{ "type": "text", "text": "..." }],
      "timestamp": "2026-01-26T10:00:15Z"
    }
  ],
  "toolCalls": [
    {
      "id": "call_123",
      "name": "read_file",
      "args": { "path": "file.ts" },
      "result": { "llmContent": "..." },
      "timestamp": "2026-01-26T10:00:20Z"
    }
  ],
  "metadata": {
    "tokenCount": 8500,
    "compressionCount": 2
  }
}
""")


def shape(value: Any) -> Any:
    """The structure of a JSON value: key names and value types, recursively (the first item of lists)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items() if key != "args"}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def _with_tool_call(session) -> None:
    message_create(session=session, role="user", content="Read the file, please.")
    message_create(session=session, role="assistant", content="Reading it now.")
    message_create(
        session=session,
        role="tool",
        content="export const x = 1;",
        tool_call_id="call_123",
        tool_name="read_file",
        tool_args={"path": "file.ts"},
    )


def test_session_file_structure(chat_session):
    """Spec: "### Session File Structure" — sessionId, startTime, lastActivity, model, provider, messages
    (role, parts of type text, timestamp), toolCalls (id, name, args, result.llmContent, timestamp), metadata
    (tokenCount, compressionCount)."""
    _with_tool_call(chat_session)
    data = session_file(session=chat_session)
    # Every field of the spec's file, with its type; metadata also carries what an import needs
    # to rebuild the same session (title, contextSize, systemPrompt: see docs/api.md).
    extra = {key: data["metadata"].pop(key) for key in ("title", "contextSize", "systemPrompt")}
    assert extra == {"title": chat_session.title, "contextSize": 16384, "systemPrompt": "You are helpful."}
    assert shape(data) == shape(SPEC_SESSION_FILE)
    assert data["model"] == "llama3.2:3b"
    assert data["provider"] == "ollama"
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
    assert data["messages"][0]["parts"] == [{"type": "text", "text": "Read the file, please."}]
    assert data["toolCalls"][0]["args"] == {"path": "file.ts"}
    assert data["toolCalls"][0]["result"] == {"llmContent": "export const x = 1;"}
    for stamp in [data["startTime"], data["lastActivity"]] + [m["timestamp"] for m in data["messages"]]:
        assert stamp.endswith("Z")


def test_full_history_is_never_affected_by_compression(due_session, gateway, fake_ollama):
    """Spec: "Never affected by compression" and "**Key Principle:** Compression only affects what's sent to the LLM,
    not what's saved to disk."."""
    fake_ollama.behaviour.canned_reply = "Recap."
    before = session_file(session=due_session)
    prompt_before = chat_messages(session_window(session=due_session))
    assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
    due_session.refresh_from_db()
    after = session_file(session=due_session)
    assert after["messages"] == before["messages"], "ALL messages (uncompressed)"
    assert chat_messages(session_window(session=due_session)) != prompt_before, "the active context did change"
    assert after["metadata"]["compressionCount"] == before["metadata"]["compressionCount"] + 1
    # "Metadata (tokens, compressions)" of the full history: compression does not change its tokens.
    assert after["metadata"]["tokenCount"] == before["metadata"]["tokenCount"]
    assert after["metadata"]["tokenCount"] == sum(due_session.messages.values_list("tokens", flat=True))
    assert after["metadata"]["tokenCount"] > session_budget(session=due_session).used, "more than the active context"


def test_active_context_contents(due_session, gateway, fake_ollama):
    """Spec: "Contains:" "System prompt", "Checkpoints (compressed history)", "User messages (never compressed)",
    "Recent messages (not yet compressed)" — and "Sent to LLM with each message"."""
    fake_ollama.behaviour.canned_reply = "Recap."
    compression_run(session_id=due_session.pk, gateway=gateway)
    until_due(due_session, start=100)
    blocks = session_window(session=due_session)
    assert blocks[0].kind == "system"
    assert due_session.system_prompt in blocks[0].content
    assert any(b.kind == "checkpoint" for b in blocks)
    active = {b.ref for b in blocks if b.kind == "message"}
    users = set(Message.objects.filter(session=due_session, role="user").values_list("id", flat=True))
    assert users <= active
    uncompressed = set(
        Message.objects.filter(session=due_session, compressed_into__isnull=True).values_list("id", flat=True)
    )
    assert active == uncompressed


def test_full_history_is_saved_to_ollm_sessions(chat_session, tmp_path, monkeypatch):
    """Spec: "Saved to `~/.ollm/sessions/{sessionId}.json`" with "ALL messages (uncompressed)" and "ALL tool calls".

    Checked as: the full history lives in the database, and ``manage.py export_sessions`` writes the session file
    to ``~/.ollm/sessions/{sessionId}.json`` by default (docs/user-guide.md, "Terminal commands"); nothing
    writes it on every message."""
    _with_tool_call(chat_session)
    monkeypatch.setenv("HOME", str(tmp_path))
    call_command("export_sessions")
    path = tmp_path / ".ollm" / "sessions" / f"{chat_session.id}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data == json.loads(json.dumps(session_file(session=chat_session)))
    assert len(data["messages"]) == 2
    assert len(data["toolCalls"]) == 1


def test_the_files_token_count_is_the_full_historys_and_an_import_counts_again(due_session, gateway, fake_ollama):
    """Spec: "Metadata (tokens, compressions)" of the "Full History (Disk)", in the session file as
    "metadata": { "tokenCount": 8500, "compressionCount": 2 }.

    ``tokenCount`` counts every message and tool call of the file; an import ignores the file's
    ``tokenCount`` and ``compressionCount`` and derives both from what it stores."""
    fake_ollama.behaviour.canned_reply = "Recap."
    assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
    exported = session_file(session=due_session)
    full = sum(due_session.messages.values_list("tokens", flat=True))
    assert exported["metadata"]["tokenCount"] == full
    exported["metadata"].update(tokenCount=1, compressionCount=7)
    imported = session_file_import(owner=due_session.owner, data=exported, on_existing="copy", gateway=gateway).session
    again = session_file(session=imported)
    assert again["metadata"]["compressionCount"] == 0
    assert again["metadata"]["tokenCount"] == sum(imported.messages.values_list("tokens", flat=True))
    assert again["metadata"]["tokenCount"] > 1
