"""Writes to sessions and messages. Each function is one domain action."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from chat.models import (
    MAX_MESSAGE_CHARS,
    MAX_MODEL_NAME_LENGTH,
    MAX_SYSTEM_PROMPT_CHARS,
    MAX_TITLE_LENGTH,
    Message,
    Session,
)
from contextmgr.core.config import ConfigError, context_config_from_mapping
from contextmgr.core.reliability import parameter_size_from_tag
from contextmgr.core.tiers import UnknownContextSize, ollama_context_size
from contextmgr.core.tokens import TiktokenCounter, TokenCount, TokenCounter, count_text_tokens
from contextmgr.services.reliability import session_refresh_reliability

DEFAULT_TITLE = "New conversation"


# PostgreSQL text cannot hold NUL bytes, and UTF-8 cannot encode an unpaired
# surrogate (a JSON body can carry one as an escape).
UNSTORABLE_CHARS = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """NUL bytes and unpaired surrogates become U+FFFD so the rest is stored as written."""
    return UNSTORABLE_CHARS.sub("\ufffd", text)


def _check_length(field: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise ValidationError({field: f"{field} is {len(value):,} characters long; the limit is {limit:,}."})


def _system_prompt_tokens(system_prompt: str) -> int:
    return count_text_tokens(system_prompt) if system_prompt else 0


@transaction.atomic
def session_create(
    *,
    owner: Any,
    model: str,
    context_size: int,
    title: str = "",
    system_prompt: str = "",
    parameter_size_b: float | None = None,
    context_limit: int | None = None,
    settings: dict[str, Any] | None = None,
) -> Session:
    """Start a conversation. ``max_tokens`` is the Ollama size of the selection, never the selection
    itself, and never more than ``context_limit`` (the model's own context length, when known)."""
    title = storable_text(title).strip() or DEFAULT_TITLE
    model = storable_text(model).strip()
    system_prompt = storable_text(system_prompt)
    if not model:
        raise ValidationError({"model": "Choose a model."})
    _check_length("title", title, MAX_TITLE_LENGTH)
    _check_length("model", model, MAX_MODEL_NAME_LENGTH)
    _check_length("system_prompt", system_prompt, MAX_SYSTEM_PROMPT_CHARS)
    max_tokens = _max_tokens(context_size, model, context_limit)
    try:
        context_config_from_mapping(settings)
    except ConfigError as exc:
        raise ValidationError({"settings": str(exc)}) from exc
    system_tokens = _system_prompt_tokens(system_prompt)
    if system_tokens >= max_tokens:
        raise ValidationError(
            {"system_prompt": f"The system prompt is {system_tokens:,} tokens; the context holds {max_tokens:,}."}
        )

    session = Session.objects.create(
        owner=owner,
        title=title,
        model=model,
        model_parameter_size_b=parameter_size_b if parameter_size_b is not None else parameter_size_from_tag(model),
        context_size=context_size,
        max_tokens=max_tokens,
        system_prompt=system_prompt,
        system_prompt_tokens=system_tokens,
        settings=settings or {},
    )
    session_refresh_reliability(session=session)
    return session


def _max_tokens(context_size: int, model: str, context_limit: int | None) -> int:
    try:
        max_tokens = ollama_context_size(
            context_size, model=model, overrides=django_settings.OLLM_MODEL_CONTEXT_OVERRIDES
        )
    except UnknownContextSize as exc:
        raise ValidationError({"context_size": str(exc)}) from exc
    return min(max_tokens, context_limit) if context_limit else max_tokens


@transaction.atomic
def session_update(
    *,
    session: Session,
    title: str | None = None,
    model: str | None = None,
    context_size: int | None = None,
    system_prompt: str | None = None,
    summary_model: str | None = None,
    parameter_size_b: float | None = None,
    context_limit: int | None = None,
) -> Session:
    """Change what the user may change about a session; ``None`` leaves a field as it is.

    A new model or context size re-evaluates the budget at once: the caller
    schedules a compression (``compression_maybe_schedule``) after commit
    when the session is now over its trigger.
    """
    locked = Session.objects.select_for_update().get(pk=session.pk)
    context_inputs = locked.context_inputs()
    if title is not None:
        locked.title = storable_text(title).strip() or DEFAULT_TITLE
        _check_length("title", locked.title, MAX_TITLE_LENGTH)
    if summary_model is not None:
        locked.summary_model = storable_text(summary_model).strip()
        _check_length("summary_model", locked.summary_model, MAX_MODEL_NAME_LENGTH)
    if model is not None:
        model = storable_text(model).strip()
        if not model:
            raise ValidationError({"model": "Choose a model."})
        _check_length("model", model, MAX_MODEL_NAME_LENGTH)
        if model != locked.model:
            locked.model = model
            locked.model_parameter_size_b = (
                parameter_size_b if parameter_size_b is not None else parameter_size_from_tag(model)
            )
    if system_prompt is not None:
        locked.system_prompt = storable_text(system_prompt)
        _check_length("system_prompt", locked.system_prompt, MAX_SYSTEM_PROMPT_CHARS)
        locked.system_prompt_tokens = _system_prompt_tokens(locked.system_prompt)
    if context_size is not None:
        locked.context_size = context_size
    if model is not None or context_size is not None or context_limit is not None:
        locked.max_tokens = _max_tokens(locked.context_size, locked.model, context_limit)
    if locked.system_prompt_tokens >= locked.max_tokens:
        raise ValidationError(
            {
                "system_prompt": f"The system prompt is {locked.system_prompt_tokens:,} tokens; "
                f"the context holds {locked.max_tokens:,}."
            }
        )
    if locked.context_inputs() != context_inputs:
        locked.next_context_version()  # a reading of the context taken before is not reused after
    locked.save()
    session_refresh_reliability(session=locked)
    return locked


@transaction.atomic
def session_delete(*, session: Session) -> None:
    """Delete a session with its whole history, checkpoints, goals, snapshots and events."""
    Session.objects.filter(pk=session.pk).delete()


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
) -> Message:
    """Store one message at the end of the session's history.

    The session row is locked for the transaction so positions stay gapless
    when two writers append at once. The message is counted here, once
    (``token_count`` when the backend reported an exact count); budgets sum
    the stored counts.
    """
    if role not in Message.Role.values:
        raise ValidationError({"role": f"role must be one of {', '.join(Message.Role.values)}, not {role!r}."})
    if not isinstance(content, str):
        raise ValidationError({"content": "content must be text."})
    content = storable_text(content)
    if role == Message.Role.USER and not content.strip():
        raise ValidationError({"content": "The message is empty."})
    _check_length("content", content, MAX_MESSAGE_CHARS)

    locked = Session.objects.select_for_update().get(pk=session.pk)
    last = locked.messages.aggregate(last=Max("position"))["last"] or 0
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
        done_reason=done_reason,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        tool_args=tool_args,
        tool_result=tool_result,
    )
    session.last_activity = now
    return message


@transaction.atomic
def message_leave_context(*, message: Message) -> None:
    """Keep a message in the full history only: it stops counting toward the context and
    stops being sent (a user message that cannot fit the context, however much is compressed).

    Locks the session row, as every change of a message's context state does.
    """
    locked = Session.objects.select_for_update().get(pk=message.session_id)
    version = locked.next_context_version()
    Message.objects.filter(pk=message.pk).update(excluded_from_context=True, context_version=version)
    message.excluded_from_context = True
    message.context_version = version
