"""An OpenAI-compatible API under /v1/, for the ``openai`` client and the tools built on it: the API
token is the key, and each conversation becomes a session with managed context.

Shapes follow OpenAI's Chat Completions: ``chat.completion`` objects, ``chat.completion.chunk``
events over SSE ending with ``data: [DONE]``, errors as ``{"error": {"message", "type", "param",
"code"}}``. What differs is said in docs/drop-in.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from asgiref.sync import async_to_sync
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from chat.conversations import conversation_reply, conversation_resolve
from chat.drop_in import (
    SESSION_HEADER,
    DropInError,
    ReplyStream,
    client_name,
    json_body,
    num_ctx_of,
    requested_session,
    sampling_of,
    token_required,
)
from chat.selectors import models_available
from chat.turn import TurnOutcome
from contextmgr.core.client_history import ClientMessage, client_request

# OpenAI's error type and code for each status these answers use.
_ERROR_KINDS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    405: ("invalid_request_error", None),
    413: ("invalid_request_error", "context_length_exceeded"),
}


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind, code = _ERROR_KINDS.get(status, ("server_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _error(status: int, message: str) -> HttpResponseBase:
    return JsonResponse(_error_body(status, message), status=status)


authenticated = token_required(_error)


def _content(value: Any) -> str:
    """A message's content: text, or a list of text parts (what newer clients send)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise DropInError(400, "Only text content parts are supported by ollm-site's managed context.")
            texts.append(part["text"])
        return "".join(texts)
    if value is None:
        return ""
    raise DropInError(400, "A message's content must be text or a list of text parts.")


def _messages(body: dict[str, Any]) -> list[ClientMessage]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise DropInError(400, "messages must be a list of {role, content} objects.")
    parsed = []
    for message in messages:
        role = message.get("role")
        if not isinstance(role, str):
            raise DropInError(400, "A message's role must be text.")
        # OpenAI's newer name for the system prompt.
        parsed.append(ClientMessage("system" if role == "developer" else role, _content(message.get("content"))))
    return parsed


def _finish_reason(outcome: TurnOutcome) -> str:
    return "length" if outcome.result.done_reason == "length" else "stop"


def _usage(outcome: TurnOutcome) -> dict[str, int]:
    prompt, completion = outcome.result.prompt_tokens, outcome.result.completion_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


@require_POST
@authenticated
def chat_completions(request: HttpRequest, user: Any) -> HttpResponseBase:
    """POST /v1/chat/completions: the request's last message is answered in its session."""
    body = json_body(request)
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise DropInError(400, "model is required.")
    if body.get("n") not in (None, 1):
        raise DropInError(400, "n must be 1.")
    for field in ("tools", "functions"):
        if body.get(field):
            raise DropInError(400, f"{field!r} is not supported by ollm-site's managed context.")
    response_format = body.get("response_format")
    if response_format not in (None, {"type": "text"}):
        raise DropInError(400, "'response_format' other than text is not supported by ollm-site's managed context.")
    # OpenAI's sampling fields that mean what Ollama's of the same name do; its frequency and presence
    # penalties subtract from a token's logit, which Ollama's repeat_penalty does not: they are not applied.
    sampling = sampling_of({name: body.get(name) for name in ("temperature", "top_p", "seed")}, "")
    conversation = conversation_resolve(
        owner=user,
        model=model.strip(),
        request=client_request(_messages(body)),
        client=client_name(request),
        # OpenAI's API has no field for it: the openai client sends extra_body={"num_ctx": 2048}.
        num_ctx=num_ctx_of(body.get("num_ctx"), "num_ctx"),
        session_id=requested_session(request),
    )
    completion_id = f"chatcmpl-{conversation.session.pk.hex}-{time.time_ns()}"
    if body.get("stream"):
        options = body.get("stream_options") or {}
        usage = isinstance(options, dict) and bool(options.get("include_usage"))
        response: HttpResponseBase = StreamingHttpResponse(
            _events(ReplyStream(conversation, sampling), model, completion_id, usage=usage),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
    else:
        outcome = async_to_sync(conversation_reply)(conversation=conversation, sampling=sampling)
        response = JsonResponse({
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": outcome.assistant_message.content},
                "finish_reason": _finish_reason(outcome),
                "logprobs": None,
            }],
            "usage": _usage(outcome),
        })  # fmt: skip
    response[SESSION_HEADER] = str(conversation.session.pk)
    return response


async def _events(stream: ReplyStream, model: str, completion_id: str, *, usage: bool) -> AsyncIterator[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, str], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return _event({
            "id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [choice],
        })  # fmt: skip

    yield chunk({"role": "assistant", "content": ""})
    async with aclosing(stream.deltas()) as deltas:
        async for delta in deltas:
            yield chunk({"content": delta})
    if stream.outcome is not None:
        yield chunk({}, _finish_reason(stream.outcome))
        if usage:
            yield _event({
                "id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [], "usage": _usage(stream.outcome),
            })  # fmt: skip
    else:
        assert stream.error is not None
        yield _event(_error_body(*stream.error))
    yield b"data: [DONE]\n\n"


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


@require_GET
@authenticated
def models(request: HttpRequest, user: Any) -> HttpResponseBase:
    """GET /v1/models: every model a backend serves now."""
    data = [{"id": info.name, "object": "model", "created": 0, "owned_by": info.backend} for info in models_available()]
    return JsonResponse({"object": "list", "data": data})


urlpatterns = [
    path("chat/completions", chat_completions),
    path("models", models),
]
