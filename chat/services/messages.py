"""Writes of a session's messages: one at the end of its history (``message_create``), many at once
(``message_create_many``: an import, a branch's own), the results of its latest tool calls
(``message_tool_results``). Each function is one domain action."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, OuterRef, Subquery
from django.utils import timezone

from chat.models import MAX_MESSAGE_CHARS, Message, Session, check_length
from engine.core.text import storable_text
from engine.core.tokens import TokenCount, TokenCounter
from engine.resources import TiktokenCounter


def _storable_content(*, role: str, content: Any) -> str:
    """The content as it is stored; a ValidationError for a role or a content no message may have."""
    if role not in Message.Role.values:
        raise ValidationError({"role": f"role must be one of {', '.join(Message.Role.values)}, not {role!r}."})
    if not isinstance(content, str):
        raise ValidationError({"content": "content must be text."})
    stored = storable_text(content)
    if role == Message.Role.USER and not stored.strip():
        raise ValidationError({"content": "The message is empty."})
    check_length("content", stored, MAX_MESSAGE_CHARS)
    return stored


@dataclass(frozen=True)
class NewMessage:
    """A message for message_create_many, counted beforehand; ``created_at`` None means now."""

    role: str
    content: str
    token_count: TokenCount
    created_at: datetime | None = None
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: Any = None
    tool_result: Any = None
    # How an imported file wrote it (Message.source_format).
    source_format: dict[str, Any] | None = None


class MessageRefused(ValidationError):
    """messages[index] of a message_create_many cannot be stored; nothing of the call was."""

    def __init__(self, index: int, error: ValidationError) -> None:
        super().__init__(error.messages)
        self.index = index


# Rows a message_create_many inserts per statement (SQLite allows 32,766 parameters a statement).
CREATE_BATCH = 500


@transaction.atomic
def message_create_many(*, session: Session, messages: Sequence[NewMessage]) -> int:
    """Store ``messages`` at the end of the session's history, in order, all or none (MessageRefused
    names the first that cannot be stored); how many were stored.

    The same checks and the same sanitizing as message_create, with one lock of the session row,
    one numbering and one context version for them all, inserted CREATE_BATCH a statement: an
    import of 5,000 messages holds the write lock (SQLite's, for the transaction) well under a second.
    """
    contents = []
    for index, new in enumerate(messages):
        try:
            contents.append(_storable_content(role=new.role, content=new.content))
        except ValidationError as exc:
            raise MessageRefused(index, exc) from exc
    locked = Session.objects.select_for_update().get(pk=session.pk)
    last = locked.messages.aggregate(last=Max("position"))["last"] or 0
    now = timezone.now()
    version = locked.next_context_version(last_activity=now)
    Message.objects.bulk_create(
        (
            Message(
                session=locked,
                context_version=version,
                position=last + offset,
                role=new.role,
                content=content,
                tokens=new.token_count.tokens,
                tokens_exact=new.token_count.exact,
                created_at=new.created_at or now,
                tool_call_id=storable_text(new.tool_call_id),
                tool_name=storable_text(new.tool_name),
                tool_args=new.tool_args,
                tool_result=new.tool_result,
                source_format=new.source_format,
            )
            for offset, (new, content) in enumerate(zip(messages, contents, strict=True), start=1)
        ),
        batch_size=CREATE_BATCH,
    )
    session.last_activity = now
    return len(messages)


@transaction.atomic
def message_create(
    *,
    session: Session,
    role: str,
    content: str,
    token_count: TokenCount | None = None,
    counter: TokenCounter | None = None,
    done_reason: str = "",
    tool_call_id: str = "",
    tool_name: str = "",
    tool_args: Any = None,
    tool_result: Any = None,
    version_of_id: int | None = None,
    attachment_name: str = "",
) -> Message:
    """Store one message at the end of the session's history; ``version_of_id``: the first version of
    the message it is another version of (a regenerated reply, an edited message); ``attachment_name``:
    the file whose text ``content`` holds (``chat.services.attachments``).

    The session row is locked for the transaction so positions stay gapless
    when two writers append at once. The message is counted here, once
    (``token_count`` when the backend reported an exact count); budgets sum
    the stored counts.
    """
    content = _storable_content(role=role, content=content)
    # The newest position read with the lock, in the same query.
    newest = Message.objects.filter(session=OuterRef("pk")).order_by("-position").values("position")[:1]
    locked = Session.objects.select_for_update().annotate(last_position=Subquery(newest)).get(pk=session.pk)
    last = locked.last_position or 0
    count = token_count or (counter or TiktokenCounter()).count(content)
    now = timezone.now()
    message = Message.objects.create(
        session=locked,
        context_version=locked.next_context_version(last_activity=now),
        position=last + 1,
        role=role,
        content=content,
        tokens=count.tokens,
        tokens_exact=count.exact,
        done_reason=storable_text(done_reason),
        tool_call_id=storable_text(tool_call_id),
        tool_name=storable_text(tool_name),
        tool_args=tool_args,
        tool_result=tool_result,
        version_of_id=version_of_id,
        attachment_name=storable_text(attachment_name),
    )
    session.last_activity = now
    return message


@dataclass(frozen=True)
class ToolResult:
    """A tool's result as a client sends it, naming the call it answers by its id (OpenAI) or by the
    tool's name (Ollama), or neither."""

    content: str
    tool_call_id: str = ""
    tool_name: str = ""


@transaction.atomic
def message_tool_results(*, session: Session, results: Sequence[tuple[ToolResult, TokenCount]]) -> Message:
    """Store the results of the session's latest tool calls, each counted (``TokenCount``) as sent: a result
    goes into the stored call it answers (by id, else by tool name, else the earliest call still without a
    result), which keeps its call's tokens besides its own (a call and its result are one entry, as the
    session file keeps them); a result that answers no open call is a tool message of its own. The open
    calls are the tool messages after the last other message, in the context and not compressed.
    The last message written, of the session as written."""
    locked = Session.objects.select_for_update().get(pk=session.pk)
    after = locked.messages.exclude(role=Message.Role.TOOL).aggregate(last=Max("position"))["last"] or 0
    open_calls = list(
        locked.messages.filter(
            role=Message.Role.TOOL, position__gt=after, content="", excluded_from_context=False, compressed_into=None
        )
        .exclude(tool_name="")
        .order_by("position")
    )
    written: Message | None = None
    for result, count in results:
        call = next((c for c in open_calls if result.tool_call_id and c.tool_call_id == result.tool_call_id), None)
        call = call or next((c for c in open_calls if result.tool_name and c.tool_name == result.tool_name), None)
        if call is None and open_calls and not (result.tool_call_id or result.tool_name):
            call = open_calls[0]
        if call is None:
            written = message_create(
                session=locked,
                role=Message.Role.TOOL,
                content=result.content,
                token_count=count,
                tool_call_id=result.tool_call_id,
                tool_name=result.tool_name,
            )
            locked.refresh_from_db(fields=["context_version", "last_activity"])
            continue
        open_calls.remove(call)
        call.content = _storable_content(role=Message.Role.TOOL, content=result.content)
        call.tokens += count.tokens
        call.tokens_exact = call.tokens_exact and count.exact
        call.context_version = locked.next_context_version(last_activity=timezone.now())
        call.save(update_fields=["content", "tokens", "tokens_exact", "context_version"])
        call.session = locked
        written = call
    if written is None:
        raise ValidationError({"content": "No tool result was sent."})
    return written
