from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from chat.export import session_file
from chat.services import message_create, session_create
from contextmgr.services.checkpoints import CheckpointDraft, compression_commit

pytestmark = pytest.mark.django_db


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
    assert data["metadata"]["tokenCount"] > 0


def test_export_sessions_writes_one_file_per_session(tmp_path, user, other_user):
    first = session_create(owner=user, model="llama3.2:3b", context_size=8192)
    second = session_create(owner=other_user, model="embedded/smollm2-135m", context_size=2048)
    out = tmp_path / "sessions"
    call_command("export_sessions", dir=str(out))
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{first.id}.json", f"{second.id}.json"])
    assert json.loads((out / f"{second.id}.json").read_text())["provider"] == "embedded"
    only = tmp_path / "only"
    call_command("export_sessions", dir=str(only), user="alice")
    assert [p.name for p in only.iterdir()] == [f"{first.id}.json"]
