"""A new session from an OLLM session file (the format ``chat.export.session_file`` writes).

The file comes from outside, so it is checked completely before anything is
written: its size, its nesting, the type of every field and the length of
every string. A file that fails any check creates nothing.

The file holds the full history but no checkpoints, so the imported session
starts uncompressed; ``metadata.tokenCount`` and ``compressionCount`` are
derived again, not copied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from chat.models import MAX_MESSAGE_CHARS, MAX_MODEL_NAME_LENGTH, MAX_SYSTEM_PROMPT_CHARS, MAX_TITLE_LENGTH, Message
from chat.models import Session as ChatSession
from chat.selectors import model_facts
from chat.services import UNSTORABLE_CHARS, message_create, session_create
from chat.turn import message_counter
from contextmgr.llm import Gateway, ModelInfo, get_gateway

# The largest file accepted, in bytes (below Django's 2.5 MB request body cap).
MAX_IMPORT_BYTES = 2 * 1024 * 1024
# Messages and tool calls together.
MAX_IMPORT_ENTRIES = 5_000
# Objects and arrays inside one another; a tool call's args and result are free JSON.
MAX_IMPORT_DEPTH = 20
MAX_NAME_CHARS = 200
MAX_TIMESTAMP_CHARS = 64
DEFAULT_IMPORT_CONTEXT_SIZE = 16384
IMPORTED_TITLE = "Imported conversation"


class ImportTooLarge(ValidationError):
    """The file is over MAX_IMPORT_BYTES (or holds more than MAX_IMPORT_ENTRIES entries)."""


@dataclass(frozen=True)
class _Entry:
    role: str
    content: str
    timestamp: datetime | None
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: Any = None
    tool_result: Any = None


@dataclass(frozen=True)
class SessionFile:
    model: str
    start: datetime | None
    last_activity: datetime | None
    title: str | None
    context_size: int | None
    system_prompt: str
    entries: list[_Entry] = field(default_factory=list)


def session_file_load(raw: bytes) -> Any:
    """Parse the bytes of a session file, refusing one over the size limit or nested without end."""
    if len(raw) > MAX_IMPORT_BYTES:
        raise ImportTooLarge(f"The file is {len(raw):,} bytes; the limit is {MAX_IMPORT_BYTES:,}.")
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise ValidationError(f"The file is nested more than {MAX_IMPORT_DEPTH} levels deep.") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(f"The file is not JSON: {exc}") from exc


def _fail(where: str, problem: str) -> ValidationError:
    return ValidationError(f"{where}: {problem}")


def _check_json(value: Any, where: str, depth: int = 0) -> None:
    """Bounded nesting, and only strings the database can store (tool args and results are free JSON)."""
    if depth > MAX_IMPORT_DEPTH:
        raise _fail(where, f"nested more than {MAX_IMPORT_DEPTH} levels deep")
    if isinstance(value, str):
        if UNSTORABLE_CHARS.search(value):
            raise _fail(where, "holds a NUL character or an unpaired surrogate")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_json(key, f"{where} key", depth + 1)
            _check_json(item, f"{where}.{key}"[:200], depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]", depth + 1)


def _string(data: dict[str, Any], key: str, where: str, *, limit: int, required: bool = True) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise _fail(f"{where}.{key}", "must be a string" if key in data else "is required")
    if len(value) > limit:
        raise _fail(f"{where}.{key}", f"is {len(value):,} characters long; the limit is {limit:,}")
    return value


def _timestamp(data: dict[str, Any], key: str, where: str) -> datetime | None:
    text = _string(data, key, where, limit=MAX_TIMESTAMP_CHARS, required=False)
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise _fail(f"{where}.{key}", f"{text!r} is not an ISO 8601 time") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, "must be an object")
    return value


def _list(data: dict[str, Any], key: str, where: str, *, required: bool) -> list[Any]:
    value = data.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise _fail(f"{where}.{key}", "must be a list" if key in data else "is required")
    return value


def _message(item: Any, where: str) -> _Entry:
    data = _object(item, where)
    role = _string(data, "role", where, limit=16)
    allowed = (Message.Role.USER, Message.Role.ASSISTANT, Message.Role.SYSTEM)
    if role not in allowed:
        raise _fail(f"{where}.role", f"must be one of {', '.join(allowed)} (tool results go in toolCalls)")
    texts = []
    for index, part in enumerate(_list(data, "parts", where, required=True)):
        part_where = f"{where}.parts[{index}]"
        part_data = _object(part, part_where)
        if part_data.get("type") != "text":
            raise _fail(f"{part_where}.type", 'must be "text"')
        texts.append(_string(part_data, "text", part_where, limit=MAX_MESSAGE_CHARS))
    content = "".join(t for t in texts if t)
    if len(content) > MAX_MESSAGE_CHARS:
        raise _fail(f"{where}.parts", f"hold {len(content):,} characters; the limit is {MAX_MESSAGE_CHARS:,}")
    return _Entry(role=role, content=content, timestamp=_timestamp(data, "timestamp", where))


def _tool_call(item: Any, where: str) -> _Entry:
    data = _object(item, where)
    call_id = _string(data, "id", where, limit=MAX_NAME_CHARS)
    name = _string(data, "name", where, limit=MAX_NAME_CHARS)
    args = _object(data.get("args", {}), f"{where}.args")
    result = _object(data.get("result"), f"{where}.result")
    if result.get("llmContent") is None:
        raise _fail(f"{where}.result.llmContent", "is required")
    content = result["llmContent"]
    if isinstance(content, str):
        if len(content) > MAX_MESSAGE_CHARS:
            raise _fail(f"{where}.result.llmContent", f"is over the limit of {MAX_MESSAGE_CHARS:,} characters")
        text, structured = content, result.get("data")
    else:
        # Another tool's file may put a structured result here: the model reads it as JSON text.
        text, structured = json.dumps(content, ensure_ascii=False), content
    return _Entry(
        role=Message.Role.TOOL,
        content=text,
        timestamp=_timestamp(data, "timestamp", where),
        tool_call_id=call_id or "",
        tool_name=name or "",
        tool_args=args,
        tool_result=structured,
    )


def _merge_in_time_order(messages: list[_Entry], calls: list[_Entry]) -> list[_Entry]:
    """The file keeps messages and tool calls apart; their timestamps put them back in one history.

    Each list keeps its own order (a stable merge), so exporting again gives both lists as they were.
    """
    merged: list[_Entry] = []
    i = j = 0
    while i < len(messages) and j < len(calls):
        left, right = messages[i].timestamp, calls[j].timestamp
        if right is not None and (left is None or right < left):
            merged.append(calls[j])
            j += 1
        else:
            merged.append(messages[i])
            i += 1
    return merged + messages[i:] + calls[j:]


def session_file_validate(data: Any) -> SessionFile:
    """Check a parsed session file completely; raises ValidationError naming the first problem."""
    root = _object(data, "file")
    _check_json(root, "file")
    metadata = _object(root.get("metadata", {}), "file.metadata")
    context_size = metadata.get("contextSize")
    if context_size is not None and (not isinstance(context_size, int) or isinstance(context_size, bool)):
        raise _fail("file.metadata.contextSize", "must be a whole number")
    messages = _list(root, "messages", "file", required=True)
    calls = _list(root, "toolCalls", "file", required=False)
    if len(messages) + len(calls) > MAX_IMPORT_ENTRIES:
        raise ImportTooLarge(
            f"The file holds {len(messages) + len(calls):,} messages and tool calls; "
            f"the limit is {MAX_IMPORT_ENTRIES:,}."
        )
    model = _string(root, "model", "file", limit=MAX_MODEL_NAME_LENGTH)
    _string(root, "provider", "file", limit=MAX_NAME_CHARS, required=False)
    _string(root, "sessionId", "file", limit=MAX_NAME_CHARS, required=False)
    return SessionFile(
        model=model or "",
        start=_timestamp(root, "startTime", "file"),
        last_activity=_timestamp(root, "lastActivity", "file"),
        title=_string(metadata, "title", "file.metadata", limit=MAX_TITLE_LENGTH, required=False),
        context_size=context_size,
        system_prompt=_string(metadata, "systemPrompt", "file.metadata", limit=MAX_SYSTEM_PROMPT_CHARS, required=False)
        or "",
        entries=_merge_in_time_order(
            [_message(item, f"file.messages[{i}]") for i, item in enumerate(messages)],
            [_tool_call(item, f"file.toolCalls[{i}]") for i, item in enumerate(calls)],
        ),
    )


def session_import(
    *,
    owner: Any,
    data: Any,
    context_size: int | None = None,
    title: str | None = None,
    gateway: Gateway | None = None,
) -> ChatSession:
    """A new session holding the file's messages and tool calls, in order, with their timestamps.

    ``context_size`` and ``title`` override the file's ``metadata.contextSize`` / ``metadata.title``.
    """
    parsed = session_file_validate(data)
    gateway = gateway or get_gateway()
    info = model_facts(model=parsed.model, gateway=gateway)
    return _session_import(
        owner=owner,
        parsed=parsed,
        context_size=context_size or parsed.context_size or DEFAULT_IMPORT_CONTEXT_SIZE,
        title=title or parsed.title or IMPORTED_TITLE,
        info=info,
        gateway=gateway,
    )


@transaction.atomic
def _session_import(
    *,
    owner: Any,
    parsed: SessionFile,
    context_size: int,
    title: str,
    info: ModelInfo | None,
    gateway: Gateway,
) -> ChatSession:
    session = session_create(
        owner=owner,
        model=parsed.model,
        context_size=context_size,
        title=title,
        system_prompt=parsed.system_prompt,
        parameter_size_b=info.parameter_size_b if info else None,
        context_limit=info.context_length if info else None,
    )
    counter = message_counter(gateway, session.model)
    stored = []
    for entry in parsed.entries:
        message = message_create(
            session=session,
            role=entry.role,
            content=entry.content,
            counter=counter,
            tool_call_id=entry.tool_call_id,
            tool_name=entry.tool_name,
            tool_args=entry.tool_args,
            tool_result=entry.tool_result,
        )
        if entry.timestamp is not None:
            message.created_at = entry.timestamp
            stored.append(message)
    Message.objects.bulk_update(stored, ["created_at"], batch_size=500)
    start = parsed.start or session.created_at
    ChatSession.objects.filter(pk=session.pk).update(
        created_at=start, last_activity=parsed.last_activity or parsed.start or session.last_activity
    )
    session.refresh_from_db()
    return session
