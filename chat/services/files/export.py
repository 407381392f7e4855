"""Export: the OLLM session file (``chat.formats.session_file.SessionFile``) of a session, its full history."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable
from typing import Any, cast

from django.http import HttpResponse

from chat.formats.file_checks import within_ranges
from chat.formats.session_file import (
    Role,
    SessionFile,
    SessionFileMessage,
    SessionFileMetadata,
    SessionFilePart,
    SessionFileToolCall,
    SessionFileToolResult,
)
from chat.models import Message, Session


def session_file_build(*, session: Session) -> SessionFile:
    """Every message (compressed or not) and tool call; the messages and the tool calls are two lists,
    put back in one history by their timestamps on import. Times to the millisecond, as the CLI writes them."""
    messages = list(Message.objects.filter(session=session).order_by("position"))
    return SessionFile(
        # An imported session gives back the file's own sessionId and provider, as the file wrote them.
        session_id=session.file_session_id,
        start_time=session.created_at,
        last_activity=session.last_activity,
        model=session.model,
        provider=session.source_provider or ("embedded" if session.model.startswith("embedded/") else "ollama"),
        messages=[
            SessionFileMessage(role=cast(Role, m.role), parts=_parts(m), timestamp=m.created_at)
            for m in messages
            if m.role != Message.Role.TOOL
        ],
        tool_calls=[
            SessionFileToolCall(
                id=m.tool_call_id,
                name=m.tool_name,
                args=m.tool_args or {},
                # llmContent is the text the model reads; a structured result rides along as data.
                result=SessionFileToolResult(
                    llm_content=m.content, return_display=_source(m).get("returnDisplay"), data=m.tool_result
                ),
                timestamp=m.created_at,
            )
            for m in messages
            if m.role == Message.Role.TOOL
        ],
        metadata=SessionFileMetadata(
            **within_ranges(
                SessionFileMetadata,
                {
                    # The file is the full history, "never affected by compression": its tokens are those
                    # of every message and tool call in it, not of the active context.
                    "token_count": sum(m.tokens for m in messages),
                    "compression_count": session.compression_count,
                    "context_size": session.context_size,
                },
            ),
            title=session.title,
            system_prompt=session.system_prompt,
            mode_history=session.source_metadata.get("modeHistory"),
        ),
    )


def _source(message: Message) -> dict[str, Any]:
    return message.source_format if isinstance(message.source_format, dict) else {}


def _parts(message: Message) -> list[SessionFilePart]:
    """The message's text as one part, or split where the imported file split it."""
    lengths = _source(message).get("parts")
    if (
        not isinstance(lengths, list)
        or not all(isinstance(n, int) for n in lengths)
        or sum(lengths) != len(message.content)
    ):
        return [SessionFilePart(type="text", text=message.content)]
    parts, start = [], 0
    for length in lengths:
        parts.append(SessionFilePart(type="text", text=message.content[start : start + length]))
        start += length
    return parts


def session_file(*, session: Session) -> dict[str, Any]:
    """The session file as JSON data, as the page, the terminal command and the zip write it."""
    return session_file_build(session=session).to_json()


def sessions_zip(*, sessions: Iterable[Session]) -> bytes:
    """A zip of one OLLM session file per session, named ``{id}.json`` by the session's own id (unique
    whoever owns it; an imported session's file holds the sessionId it came with)."""
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
