"""Background tasks an outside client asks for through the Ollama or OpenAI endpoint (a chat's title,
tags, follow-up questions…: ``engine.core.client_tasks``), answered apart from any session.

Such a request is the client's template with a few of its chat's messages, written to be answered
once: the model is sent its messages as they came (no session, no managed context), and the task
is kept as a ClientTask, with its texts, sizes and the model's time, for review.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction

from accounts.models import ApiToken
from chat.gateway import get_gateway
from chat.models import DEFAULT_CONTEXT_SIZE, MAX_SOURCE_FIELD_LENGTH, ClientTask
from chat.services.conversations import model_refuse_unserved
from chat.services.turn import OnDelta
from engine.core.budget import REPLY_MIN_TOKENS
from engine.core.client_history import ClientMessage
from engine.core.config import reply_max_tokens
from engine.core.text import storable_text
from engine.llm import (
    ChatMessage,
    ChatRequest,
    ChatResult,
    ContextOverflow,
    Gateway,
    LLMRequestError,
    Sampling,
)
from engine.resources import context_profile


@dataclass(frozen=True)
class ClientTaskRequest:
    """A background task as it came: who sent it (``token`` None without one), what it asks of which model."""

    owner: Any
    token: ApiToken | None
    client: str
    kind: str
    model: str
    messages: Sequence[ClientMessage]
    num_ctx: int | None
    sampling: Sampling
    # The request's own cap on the answer (OpenAI's max_tokens, Ollama's num_predict), None without one.
    max_tokens: int | None = None


@dataclass(frozen=True)
class ClientTaskOutcome:
    """The answer to a background task, read as a turn's (``new_text``, ``result``) by the endpoints."""

    task: ClientTask
    new_text: str
    result: ChatResult


def client_task_check(*, request: ClientTaskRequest, gateway: Gateway | None = None) -> None:
    """Refuse a task before anything is stored or asked, as a turn is refused: a ValidationError (on
    ``model``) for a model no backend serves."""
    model_refuse_unserved(request.model, gateway)


async def client_task_answer(
    *, request: ClientTaskRequest, gateway: Gateway | None = None, on_delta: OnDelta | None = None
) -> ClientTaskOutcome:
    """Answer ``request`` from its own messages (``on_delta`` hears the answer, at once when the model is done
    with it: a background request is not streamed, as another host may have to start it over) and record
    it (``client_task_record``), answered or not; raises what the model raised, a ContextOverflow when
    the messages leave no room for an answer within the request's num_ctx (the default selection's
    without one). The answer is capped as a turn's is, by OLLM_CLIENT_TASK_MAX_TOKENS and by the request's own
    ``max_tokens``; it waits behind chat turns (a background request).
    Precondition: ``client_task_check`` passed."""
    gateway = gateway or get_gateway()
    num_ctx = request.num_ctx or context_profile(DEFAULT_CONTEXT_SIZE).ollama_context_size
    messages = [ChatMessage(m.role, m.content) for m in request.messages]
    prompt = await sync_to_async(gateway.count_prompt, thread_sensitive=False)(messages, request.model)
    parts: list[str] = []
    try:
        if num_ctx - prompt.tokens < REPLY_MIN_TOKENS:
            raise ContextOverflow(
                f"The task's {prompt.tokens:,} tokens leave no room for an answer in a context of {num_ctx:,}."
            )
        max_tokens = min(
            reply_max_tokens(num_ctx, settings.OLLM_REPLY_MAX_TOKENS),
            num_ctx - prompt.tokens,
            settings.OLLM_CLIENT_TASK_MAX_TOKENS,
        )
        if request.max_tokens is not None:
            max_tokens = min(max_tokens, request.max_tokens)
        # In the background queue: the chat turns of everyone on the host go first.
        stream = gateway.send(
            ChatRequest(
                messages,
                model=request.model,
                num_ctx=num_ctx,
                max_tokens=max_tokens,
                sampling=request.sampling,
                background=True,
            )
        )
        try:
            async for delta in stream:
                parts.append(delta)
                if on_delta is not None:
                    await on_delta(delta)
        finally:
            await stream.aclose()
        result = stream.result
        if result is None:
            raise LLMRequestError("the reply ended without its final counts")
    except BaseException as exc:
        error = "The client went away." if isinstance(exc, asyncio.CancelledError) else str(exc) or type(exc).__name__
        await asyncio.shield(
            sync_to_async(client_task_record)(request=request, response="".join(parts), result=None, error=error)
        )
        raise
    task = await sync_to_async(client_task_record)(request=request, response="".join(parts), result=result, error="")
    return ClientTaskOutcome(task=task, new_text="".join(parts), result=result)


@transaction.atomic
def client_task_record(
    *, request: ClientTaskRequest, response: str, result: ChatResult | None, error: str
) -> ClientTask:
    """Keep a background task for review: its messages as sent, what the model answered (``result``:
    the counts and times of a finished answer, None for one that failed with ``error``)."""
    return ClientTask.objects.create(
        owner=request.owner,
        token=request.token,
        client=storable_text(request.client)[:MAX_SOURCE_FIELD_LENGTH],
        kind=request.kind,
        model=request.model,
        prompt=storable_text("\n\n".join(f"[{m.role}]\n{m.content}" for m in request.messages)),
        response=storable_text(response),
        error=storable_text(error),
        prompt_tokens=result.prompt_tokens if result else 0,
        completion_tokens=result.completion_tokens if result else 0,
        model_seconds=(result.prompt_seconds + result.generation_seconds) if result else 0.0,
    )
