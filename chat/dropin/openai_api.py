"""An OpenAI-compatible API under /v1/, for the ``openai`` client and the tools built on it: the API
token is the key, and each conversation becomes a session with managed context.

Shapes follow OpenAI's Chat Completions: ``chat.completion`` objects, ``chat.completion.chunk``
events over SSE ending with ``data: [DONE]``, errors as ``{"error": {"message", "type", "param",
"code"}}``. What differs is said in docs/drop-in.md.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import path, re_path

from chat.dropin.common import (
    SESSION_HEADER,
    Answer,
    Caller,
    DropInError,
    ReplyStream,
    client_message,
    endpoint,
    json_body,
    max_tokens_of,
    model_of,
    num_ctx_of,
    reply_for,
    sampling_of,
    tools_answered_as_text,
    tools_for,
    unknown_route,
)
from chat.dropin.fields import flag_of, function_checked, number_of, stop_of, text_of, tools_checked
from chat.selectors.sessions import models_available
from engine.core.client_history import ClientMessage

# OpenAI's error type for each status these answers use; the code is the fault's (chat.dropin.common.Fault).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
}


def _error_body(status: int, message: str, fault: str | None = None) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": fault}}


def _error(status: int, message: str, fault: str | None = None) -> HttpResponseBase:
    return JsonResponse(_error_body(status, message, fault), status=status)


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
            raise DropInError(400, "a message's role must be text.")
        # OpenAI's newer name for the system prompt.
        parsed.append(
            client_message(message, "system" if role == "developer" else role, _content(message.get("content")))
        )
    return parsed


def _finish_reason(outcome: Answer) -> str:
    if outcome.result.tool_calls:
        return "tool_calls"
    return "length" if outcome.result.done_reason == "length" else "stop"


def _tool_calls(outcome: Answer, *, streamed: bool = False) -> list[dict[str, Any]]:
    """The reply's tool calls in OpenAI's shape, arguments as JSON text (a streamed delta's with their index)."""
    return [
        {
            **({"index": index} if streamed else {}),
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for index, call in enumerate(outcome.result.tool_calls)
    ]


def _message(outcome: Answer) -> dict[str, Any]:
    """The reply's message: its text (none when it only called tools), and its tool calls."""
    calls = _tool_calls(outcome)
    if not calls:
        return {"role": "assistant", "content": outcome.new_text}
    return {"role": "assistant", "content": outcome.new_text or None, "tool_calls": calls}


def _usage(outcome: Answer) -> dict[str, int]:
    prompt, completion = outcome.result.prompt_tokens, outcome.result.completion_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _fields_checked(body: dict[str, Any]) -> None:
    """Refuse a field of the wrong type rather than pass it on or read it loosely (issue 49, item 6), even
    one that is not applied (``stop``, the penalties: docs/drop-in.md)."""
    flag_of(body.get("stream"), "stream")
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise DropInError(400, "stream_options must be an object.")
        flag_of(options.get("include_usage"), "stream_options.include_usage")
    stop_of(body.get("stop"), "stop")
    text_of(body.get("user"), "user")
    for name in ("frequency_penalty", "presence_penalty"):
        number_of(body.get(name), name)
    for name in ("logprobs", "parallel_tool_calls", "store"):
        flag_of(body.get(name), name)
    functions = body.get("functions")
    if functions is not None:
        if not isinstance(functions, list):
            raise DropInError(400, "functions must be a list of {name, description?, parameters?} objects.")
        for index, function in enumerate(functions):
            function_checked(function, f"functions[{index}]")


@endpoint(_error, "POST")
def chat_completions(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """POST /v1/chat/completions: the request's last message is answered in its session, or a background
    task apart (``reply_for``)."""
    body = json_body(request)
    model = model_of(body)
    if body.get("n") not in (None, 1) or isinstance(body.get("n"), bool):
        raise DropInError(400, "n must be 1.")
    _fields_checked(body)
    tools_checked(body.get("tools"))
    tools = tools_for(model, body.get("tools"), body.get("tool_choice"))
    # The deprecated form of the same: ``functions`` with ``function_call``.
    tools_answered_as_text(
        body.get("functions"), body.get("function_call"), "function_call", "functions are passed to no model: use tools"
    )
    response_format = body.get("response_format")
    if response_format not in (None, {"type": "text"}):
        raise DropInError(400, "'response_format' other than text is not supported by ollm-site's managed context.")
    # OpenAI's sampling fields that mean what Ollama's of the same name do; its frequency and presence
    # penalties subtract from a token's logit, which Ollama's repeat_penalty does not: they are not applied.
    sampling = sampling_of({name: body.get(name) for name in ("temperature", "top_p", "seed")}, "")
    reply = reply_for(
        request,
        caller,
        model=model,
        messages=_messages(body),
        # OpenAI's API has no field for it: the openai client sends extra_body={"num_ctx": 2048}.
        num_ctx=num_ctx_of(body.get("num_ctx"), "num_ctx"),
        sampling=sampling,
        # Open WebUI sends its task requests max_tokens (Ollama models) or max_completion_tokens (others).
        max_tokens=max_tokens_of(body.get("max_completion_tokens"), "max_completion_tokens")
        or max_tokens_of(body.get("max_tokens"), "max_tokens"),
        tools=tools,
    )
    answered = reply.session_id or uuid.uuid4()  # a background task's answer is of no session
    completion_id = f"chatcmpl-{answered.hex}-{time.time_ns()}"
    if body.get("stream"):
        options = body.get("stream_options") or {}
        usage = isinstance(options, dict) and bool(options.get("include_usage"))
        response: HttpResponseBase = StreamingHttpResponse(
            _events(reply.stream(), model, completion_id, usage=usage), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
    else:
        outcome = reply.now()
        response = JsonResponse({
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{
                "index": 0,
                "message": _message(outcome),
                "finish_reason": _finish_reason(outcome),
                "logprobs": None,
            }],
            "usage": _usage(outcome),
        })  # fmt: skip
    if reply.session_id is not None:
        response[SESSION_HEADER] = str(reply.session_id)
    return response


async def _events(stream: ReplyStream, model: str, completion_id: str, *, usage: bool) -> AsyncIterator[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
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
        if stream.outcome.result.tool_calls:
            yield chunk({"tool_calls": _tool_calls(stream.outcome, streamed=True)})
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


@endpoint(_error, "GET", "HEAD")
def models(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """GET /v1/models: every model a backend serves now."""
    data = [{"id": info.name, "object": "model", "created": 0, "owned_by": info.backend} for info in models_available()]
    return JsonResponse({"object": "list", "data": data})


urlpatterns = [
    path("chat/completions", chat_completions),
    path("models", models),
    re_path(r"", unknown_route(_error)),
]
