"""The OLLM session file of the spec: the full, uncompressed history of a session."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.http import HttpResponse

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


def sessions_zip(*, sessions: Iterable[Session]) -> bytes:
    """A zip of one OLLM session file (``{sessionId}.json``) per session."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for session in sessions:
            data = json.dumps(session_file(session=session), ensure_ascii=False, indent=2)
            archive.writestr(f"{session.id}.json", data)
    return buffer.getvalue()


def sessions_zip_response(*, sessions: Iterable[Session], name: str) -> HttpResponse:
    response = HttpResponse(sessions_zip(sessions=sessions), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{name}.zip"'
    return response
