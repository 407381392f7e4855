"""The OLLM session file of the spec: the full, uncompressed history of a session."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chat.models import Message, Session
from contextmgr.selectors import session_budget


def _timestamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def session_file(*, session: Session) -> dict[str, Any]:
    """Every message (compressed or not) and tool call, with the spec's field names."""
    messages = list(Message.objects.filter(session=session).order_by("position"))
    return {
        "sessionId": str(session.id),
        "startTime": _timestamp(session.created_at),
        "lastActivity": _timestamp(session.last_activity),
        "model": session.model,
        "provider": "embedded" if session.model.startswith("embedded/") else "ollama",
        "messages": [
            {"role": m.role, "parts": [{"type": "text", "text": m.content}], "timestamp": _timestamp(m.created_at)}
            for m in messages
            if m.role != Message.Role.TOOL
        ],
        "toolCalls": [
            {
                "id": m.tool_call_id,
                "name": m.tool_name,
                "args": m.tool_args or {},
                # llmContent is the text the model reads; a structured result rides along as data.
                "result": {"llmContent": m.content, **({} if m.tool_result is None else {"data": m.tool_result})},
                "timestamp": _timestamp(m.created_at),
            }
            for m in messages
            if m.role == Message.Role.TOOL
        ],
        "metadata": {
            "tokenCount": session_budget(session=session).used,
            "compressionCount": session.compression_count,
            # Beyond the spec's fields: what an import needs to rebuild the same session.
            "title": session.title,
            "contextSize": session.context_size,
            "systemPrompt": session.system_prompt,
        },
    }
