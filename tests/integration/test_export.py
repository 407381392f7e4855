from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from chat.formats.session_file import SessionFile
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.files import session_file
from chat.services.messages import message_create
from chat.services.sessions import session_create

pytestmark = pytest.mark.django_db
CLI_FILE = Path(__file__).parent.parent / "data" / "ollm_cli_session.json"


def test_the_session_file_holds_the_full_history_even_after_compression(chat_session):
    message_create(session=chat_session, role="user", content="Read the file")
    reply = message_create(session=chat_session, role="assistant", content="Reading <file> now… 🧪")
    message_create(
        session=chat_session,
        role="tool",
        content="contents",
        tool_call_id="call_1",
        tool_name="read_file",
        tool_args={"path": "file.ts"},
    )
    compression_commit(session=chat_session, message_ids=[reply.id], draft=CheckpointDraft(summary="Read it."))
    data = session_file(session=chat_session)
    assert data["sessionId"] == str(chat_session.id)
    assert data["provider"] == "ollama"
    assert data["model"] == "llama3.2:3b"
    assert data["startTime"].endswith("Z")
    assert [(m["role"], m["parts"]) for m in data["messages"]] == [
        ("user", [{"type": "text", "text": "Read the file"}]),
        ("assistant", [{"type": "text", "text": "Reading <file> now… 🧪"}]),
    ]
    (call,) = data["toolCalls"]
    assert (call["id"], call["name"], call["args"], call["result"]) == (
        "call_1",
        "read_file",
        {"path": "file.ts"},
        {"llmContent": "contents"},
    )
    assert data["metadata"]["compressionCount"] == 1
    # The full history's tokens, the compressed reply's included; not the active context's.
    assert data["metadata"]["tokenCount"] == sum(chat_session.messages.values_list("tokens", flat=True))
    assert reply.tokens > 0


def test_export_sessions_writes_one_file_per_session(tmp_path, user, other_user):
    first = session_create(owner=user, model="llama3.2:3b", context_size=8192)
    second = session_create(owner=other_user, model="embedded/smollm2-135m", context_size=2048)
    out = tmp_path / "sessions"
    call_command("export_sessions", dir=str(out))
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{first.id}.json", f"{second.id}.json"])
    written = json.loads((out / f"{second.id}.json").read_text())
    assert written["provider"] == "embedded"
    assert SessionFile.model_validate(written).to_json() == written
    only = tmp_path / "only"
    call_command("export_sessions", dir=str(only), user="alice")
    assert [p.name for p in only.iterdir()] == [f"{first.id}.json"]


def _keys(value):
    """The names of every object in a file, by where they are (list items merged; free JSON left out)."""
    if isinstance(value, dict):
        return {key: None if key in ("args", "data") else _keys(item) for key, item in value.items()}
    if isinstance(value, list):
        merged: dict[str, Any] = {}
        for item in value:
            merged.update(_keys(item))
        return merged
    return None


def test_an_export_is_the_file_the_ollm_cli_reads(chat_session):
    """The CLI's Session, field for field (what a file it recorded holds), plus ollm-site's three metadata
    fields and a structured tool result's data; nothing the CLI reads is missing or of another type."""
    message_create(session=chat_session, role="user", content="Read the file")
    message_create(session=chat_session, role="assistant", content="Reading it")
    message_create(
        session=chat_session,
        role="tool",
        content='{"rows": 2}',
        tool_call_id="call_1",
        tool_name="query",
        tool_args={"sql": "select 1", "limit": None},
        tool_result={"rows": 2},
    )
    data = session_file(session=chat_session)
    recorded = json.loads(CLI_FILE.read_text(encoding="utf-8"))
    expected = _keys(recorded)
    # ollm-site's own, where the CLI does not look; modeHistory and returnDisplay are the CLI's own.
    expected["metadata"] = dict.fromkeys(["tokenCount", "compressionCount", "title", "contextSize", "systemPrompt"])
    expected["toolCalls"]["result"] = dict.fromkeys(["llmContent", "data"])
    assert _keys(data) == expected
    for name in ("sessionId", "model", "provider"):
        assert isinstance(data[name], str)
    entries = data["messages"] + data["toolCalls"]
    for stamp in [data["startTime"], data["lastActivity"], *(entry["timestamp"] for entry in entries)]:
        assert stamp.endswith("Z")
        assert datetime.fromisoformat(stamp).tzinfo is not None
    assert all(isinstance(part["text"], str) for m in data["messages"] for part in m["parts"])
    (call,) = data["toolCalls"]
    assert call["args"] == {"sql": "select 1", "limit": None}  # a null inside args is kept
    assert call["result"] == {"llmContent": '{"rows": 2}', "data": {"rows": 2}}
    assert isinstance(data["metadata"]["tokenCount"], int)
    assert isinstance(data["metadata"]["compressionCount"], int)
    assert SessionFile.model_validate(data).to_json() == data
