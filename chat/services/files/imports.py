"""A new session from an OLLM session file (``chat.formats.session_file.SessionFile``: ollm-site's export or
a file the OLLM CLI recorded).

The file comes from outside, so it is checked completely before anything is written: its size
here, everything else by the model. A file that fails any check creates nothing.

The file holds the full history but no checkpoints, so the imported session starts uncompressed;
``metadata.tokenCount`` and ``compressionCount`` are derived again, not copied.

The file's ``sessionId`` and ``provider`` are kept on the session (its export writes them back), and
the sessionId recognises a second import of the same file: one of the owner's sessions already has
it (imported from it, or started here and exported). What then happens is the caller's choice
(``on_existing``): refused (ImportConflict, the default), an update of that session (the messages
the file has after those the session holds are added; nothing the session holds is changed or
removed), or a copy (a new session under its own id).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max

from chat.formats.file_checks import ImportTooLarge, json_load, validated
from chat.formats.session_file import SessionFile
from chat.gateway import get_gateway
from chat.models import Message
from chat.models import Session as ChatSession
from chat.selectors.sessions import ModelFacts, model_facts, session_for_file
from chat.services.counting import message_counter
from chat.services.files.export import session_file_build
from chat.services.messages import MessageRefused, NewMessage, message_create_many
from chat.services.sessions import session_start
from engine.llm import Gateway

DEFAULT_IMPORT_CONTEXT_SIZE = 16384
IMPORTED_TITLE = "Imported conversation"


# What an import does with a file whose sessionId is one of the owner's sessions already.
OnExisting = Literal["refuse", "update", "copy"]


class ImportConflict(Exception):
    """The file's sessionId is the owner's session ``session_id`` already, and the import may not go on as asked."""

    def __init__(self, session_id: Any, message: str) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.message = message


@dataclass(frozen=True)
class Imported:
    """An import's outcome: the session, whether the import created it, and how many messages it added."""

    session: ChatSession
    created: bool
    added: int


@dataclass(frozen=True)
class ImportsThrottled:
    """The user has started ``limit`` imports this minute; the next may start in ``retry_after`` seconds."""

    limit: int
    retry_after: int

    @property
    def message(self) -> str:
        return f"Too many imports: at most {self.limit} a minute. Try again in {self.retry_after} seconds."


def import_throttle(*, owner: Any) -> ImportsThrottled | None:
    """Count an import the user starts (whether or not its file is good: reading one is the work);
    an ImportsThrottled when the user has already started OLLM_IMPORTS_PER_MINUTE this minute.

    A counter in the cache per user and clock minute: shared by every process when the cache is
    (Redis), per process with Django's default local-memory cache."""
    limit = settings.OLLM_IMPORTS_PER_MINUTE
    now = time.time()
    minute = int(now // 60)
    key = f"ollm:imports:{owner.pk}:{minute}"
    cache.add(key, 0, timeout=120)
    try:
        started = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=120)
        started = 1
    if started <= limit:
        return None
    return ImportsThrottled(limit=limit, retry_after=max(1, math.ceil((minute + 1) * 60 - now)))


def session_file_load(raw: bytes) -> Any:
    """Parse the bytes of a session file, refusing one over the size limit or nested without end.

    NaN and Infinity are read as Python reads them and refused by the model where they stand."""
    return json_load(raw, what="file")


def session_file_parse(data: Any) -> SessionFile:
    """The file checked completely; ValidationError names each problem's place (``file.messages[3].role``),
    ImportTooLarge a file with too many entries."""
    return validated(SessionFile, data, document="file", too_large=ImportTooLarge)


@dataclass(frozen=True)
class _Entry:
    where: str
    role: str
    content: str
    timestamp: datetime | None
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: Any = None
    tool_result: Any = None
    source_format: dict[str, Any] | None = None


def _history(file: SessionFile) -> list[_Entry]:
    """The file keeps messages and tool calls apart; their timestamps put them back in one history.

    Each list keeps its own order (a stable merge), so exporting again gives both lists as they were.
    """
    messages = [
        _Entry(
            where=f"file.messages[{i}]",
            role=m.role,
            content=m.text,
            timestamp=m.timestamp,
            # One text of several parts: their boundaries, so the export splits it as the file did.
            source_format={"parts": [len(part.text) for part in m.parts]} if len(m.parts) > 1 else None,
        )
        for i, m in enumerate(file.messages)
    ]
    calls = []
    for i, call in enumerate(file.tool_calls):
        content = call.result.llm_content
        if isinstance(content, str):
            text, structured = content, call.result.data
        else:
            # Another tool's file may put a structured result here: the model reads it as JSON text.
            text, structured = json.dumps(content, ensure_ascii=False), content
        calls.append(
            _Entry(
                where=f"file.toolCalls[{i}]",
                role=Message.Role.TOOL,
                content=text,
                timestamp=call.timestamp,
                tool_call_id=call.id,
                tool_name=call.name,
                tool_args=call.args,
                tool_result=structured,
                source_format=(
                    {"returnDisplay": call.result.return_display} if call.result.return_display is not None else None
                ),
            )
        )
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


def session_file_import(
    *,
    owner: Any,
    data: Any,
    context_size: int | None = None,
    title: str | None = None,
    on_existing: OnExisting = "refuse",
    gateway: Gateway | None = None,
) -> Imported:
    """A new session holding the file's messages and tool calls, in order, with their timestamps, its
    sessionId and provider; all of it or, for a bad file, nothing (a ValidationError says what is wrong).

    ``context_size`` and ``title`` override the file's ``metadata.contextSize`` / ``metadata.title``;
    a context size of 0 is refused as any other size not offered, never read as "not set".

    A file whose sessionId is one of the owner's sessions already (``session_for_file``): with
    ``on_existing`` "refuse", an ImportConflict naming that session; "update", that session gets
    what the file has after the history it holds (``session_update_from_file``); "copy", a new
    session as for any other file, but under its own id (its export writes its own sessionId, so
    the two never share one).

    The session does not compress now, however far over its budget: its first turn checks the
    budget before the reply (or the user asks for a compression), so an import starts no model work.
    """
    file = session_file_parse(data)
    source_id = file.session_id or ""
    existing = None if on_existing == "copy" else session_for_file(user=owner, file_session_id=source_id)
    if existing is not None:
        if on_existing == "refuse":
            raise ImportConflict(existing.pk, _imported_before(existing, source_id))
        if context_size is not None or title is not None:
            raise ValidationError(
                f"An update keeps session {existing.pk}'s title and context size: change them with "
                f"PATCH /api/sessions/{existing.pk}, not in the import."
            )
        return session_update_from_file(session=existing, file=file, gateway=gateway)
    gateway = gateway or get_gateway()
    # Asked before the transaction, which on SQLite holds the write lock from its start: the
    # backend about the model, and the model's tokenizer (over HTTP) about every message.
    # A model not served here is no reason to refuse the file: the session is imported whole,
    # and says its model is not available (``model_availability``) until it is, or is switched.
    facts = model_facts(model=file.model, gateway=gateway, served=False)
    entries = _history(file)
    history = _counted(entries, model=file.model, gateway=gateway)
    try:
        session = _session_import(
            owner=owner,
            file=file,
            source_session_id="" if on_existing == "copy" else source_id,
            history=history,
            places=[entry.where for entry in entries],
            context_size=next(
                (size for size in (context_size, file.metadata.context_size) if size is not None),
                DEFAULT_IMPORT_CONTEXT_SIZE,
            ),
            title=title or file.metadata.title or IMPORTED_TITLE,
            facts=facts,
        )
    except IntegrityError:
        # Another import of the same file got there first (the database allows one session per file and owner).
        raced = session_for_file(user=owner, file_session_id=source_id)
        if raced is None:
            raise
        raise ImportConflict(raced.pk, _imported_before(raced, source_id)) from None
    return Imported(session=session, created=True, added=len(history))


def _imported_before(session: ChatSession, source_id: str) -> str:
    return (
        f"This file (sessionId {source_id}) is your session {session.pk} already. "
        "Import it with on_existing=update to add the messages the file has after those the session holds, "
        "or with on_existing=copy to import it as a new session."
    )


def _counted(entries: list[_Entry], *, model: str, gateway: Gateway) -> list[NewMessage]:
    counts = message_counter(gateway, model).count_all([entry.content for entry in entries])
    return [
        NewMessage(
            role=entry.role,
            content=entry.content,
            token_count=count,
            created_at=entry.timestamp,
            tool_call_id=entry.tool_call_id,
            tool_name=entry.tool_name,
            tool_args=entry.tool_args,
            tool_result=entry.tool_result,
            source_format=entry.source_format,
        )
        for entry, count in zip(entries, counts, strict=True)
    ]


def session_update_from_file(*, session: ChatSession, file: SessionFile, gateway: Gateway | None = None) -> Imported:
    """Add to ``session`` the messages and tool calls ``file`` has after the history the session holds.

    The session's history, as its own export would give it, must be where the file's starts (or
    hold all of the file: nothing is added); when the two went separate ways (a message of the
    session the file does not have) it is an ImportConflict, and nothing changes. Nothing the
    session holds is changed or removed: not a message, nor its title, model, context size,
    system prompt, provider or checkpoints; the added messages count with the session's model and
    take the session's last activity to the file's ``lastActivity`` when that is later.

    The file's two lists are compared one by one, as the file keeps them: put in one history by
    their times, two entries of the same millisecond could come out in either order.
    """
    held = session_file_build(session=session)
    pairs = [
        *(
            ((m.role, m.text), (theirs.role, theirs.text), f"file.messages[{i}]")
            for i, (m, theirs) in enumerate(zip(held.messages, file.messages, strict=False))
        ),
        *(
            ((c.id, c.name), (theirs.id, theirs.name), f"file.toolCalls[{i}]")
            for i, (c, theirs) in enumerate(zip(held.tool_calls, file.tool_calls, strict=False))
        ),
    ]
    for mine, theirs, where in pairs:
        if mine != theirs:
            raise ImportConflict(
                session.pk,
                f"The file (sessionId {file.session_id}) and your session {session.pk} went separate ways "
                f"at {where} ({mine[0]} here, {theirs[0]} in the file): an update only adds what the file has "
                "after the session's history. Import it with on_existing=copy to keep both.",
            )
    new = {f"file.messages[{i}]" for i in range(len(held.messages), len(file.messages))}
    new |= {f"file.toolCalls[{i}]" for i in range(len(held.tool_calls), len(file.tool_calls))}
    added = [entry for entry in _history(file) if entry.where in new]
    if not added:
        return Imported(session=session, created=False, added=0)
    history = _counted(added, model=session.model, gateway=gateway or get_gateway())
    _session_extend(
        session=session,
        held=len(held.messages) + len(held.tool_calls),
        history=history,
        places=[entry.where for entry in added],
        last_activity=file.last_activity,
    )
    session.refresh_from_db()
    return Imported(session=session, created=False, added=len(history))


@transaction.atomic
def _session_extend(
    *, session: ChatSession, held: int, history: list[NewMessage], places: list[str], last_activity: datetime | None
) -> None:
    locked = ChatSession.objects.select_for_update().get(pk=session.pk)
    before = locked.last_activity
    # Counted outside the transaction: the session may have gained a message since it was compared.
    if (Message.objects.filter(session=locked).aggregate(n=Max("position"))["n"] or 0) != held:
        raise ImportConflict(
            session.pk, f"Session {session.pk} changed while the file was read; send the import again."
        )
    try:
        message_create_many(session=locked, messages=history)
    except MessageRefused as exc:
        raise ValidationError(f"{places[exc.index]}: {' '.join(exc.messages)}") from exc
    latest = max(before, last_activity) if last_activity is not None else locked.last_activity
    ChatSession.objects.filter(pk=session.pk).update(last_activity=latest)


@transaction.atomic
def _session_import(
    *,
    owner: Any,
    file: SessionFile,
    source_session_id: str,
    history: list[NewMessage],
    places: list[str],
    context_size: int,
    title: str,
    facts: ModelFacts,
) -> ChatSession:
    session = session_start(
        owner=owner,
        model=file.model,
        context_size=context_size,
        title=title,
        system_prompt=file.metadata.system_prompt or "",
        facts=facts,
    )
    try:
        message_create_many(session=session, messages=history)
    except MessageRefused as exc:
        raise ValidationError(f"{places[exc.index]}: {' '.join(exc.messages)}") from exc
    start = file.start_time or session.created_at
    ChatSession.objects.filter(pk=session.pk).update(
        created_at=start,
        last_activity=file.last_activity or file.start_time or session.last_activity,
        source_session_id=source_session_id,
        source_provider=file.provider or "",
        source_metadata={"modeHistory": file.metadata.mode_history} if file.metadata.mode_history is not None else {},
    )
    session.refresh_from_db()
    return session
