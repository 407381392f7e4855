"""Ollama's API under /ollama/, for the clients people already use (the ``ollama`` Python client,
Open WebUI, editor plugins): each conversation becomes a session with managed context.

Shapes follow Ollama's API (docs/api.md of ollama/ollama): NDJSON chunks while streaming, the counts
and durations (nanoseconds) on the last one, errors as ``{"error": "..."}``. What differs is said in
docs/drop-in.md: the prompt sent is the session's managed one, ``tools`` reach only a model that
takes them (its reply is text otherwise), and ``images`` and ``format`` are refused rather than ignored.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import path, re_path
from django.utils import timezone

from chat.dropin.common import (
    SESSION_HEADER,
    Answer,
    AskedCap,
    Caller,
    DropInError,
    Fault,
    ReplyStream,
    client_message,
    endpoint,
    json_body,
    max_tokens_of,
    model_of,
    num_ctx_of,
    reply_for,
    sampling_of,
    tools_for,
    unknown_route,
)
from chat.dropin.fields import flag_of, number_of, stop_of, text_of, tools_checked
from chat.selectors.sessions import models_available
from engine.core.client_history import ClientMessage
from engine.core.times import iso_millis
from engine.llm.types import ModelInfo, Sampling

# The version of Ollama's API these shapes follow; clients ask it before using newer fields.
OLLAMA_API_VERSION = "0.12.0"
NANOSECONDS = 1_000_000_000
# What a model does through the managed context, of what it can: tools are passed to a model that takes
# them (``tools_for``), images are refused.
SERVED_CAPABILITIES = ("completion", "tools")
# Ollama's options that are true or false; every other is a number, but ``stop`` (texts).
# Options read below, each checked with its own range and message.
CHECKED_OPTIONS = frozenset({"num_ctx", "num_predict", *Sampling.__dataclass_fields__})
FLAG_OPTIONS = frozenset({"penalize_newline", "numa", "low_vram", "f16_kv", "vocab_only", "use_mmap", "use_mlock"})


def _error(status: int, message: str, fault: str | None = None) -> HttpResponseBase:
    return JsonResponse({"error": message}, status=status)


def _get(view: Any) -> Any:
    return endpoint(_error, "GET", "HEAD")(view)


def _post(view: Any) -> Any:
    return endpoint(_error, "POST")(view)


def _now() -> str:
    return iso_millis(timezone.now())


def _parameter_size(billions: float | None) -> str:
    if billions is None:
        return ""
    return f"{round(billions * 1000)}M" if billions < 1 else f"{billions:g}B"


def _details(info: ModelInfo) -> dict[str, Any]:
    return {
        "format": "gguf",
        "family": info.family,
        "families": [info.family] if info.family else None,
        "parameter_size": _parameter_size(info.parameter_size_b),
        "quantization_level": "",
    }


def _model(info: ModelInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "model": info.name,
        "modified_at": _now(),
        "size": 0,
        "digest": "",
        "details": _details(info),
        "capabilities": _capabilities(info),
    }


def _capabilities(info: ModelInfo) -> list[str]:
    """What the model does here: what the backend's model can, of what the managed context serves."""
    return [c for c in info.capabilities if c in SERVED_CAPABILITIES]


def _find_model(name: str) -> ModelInfo:
    for info in models_available():
        if info.name == name or info.name == f"{name}:latest":
            return info
    raise DropInError(404, f"model '{name}' not found", Fault.MODEL_NOT_FOUND)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise DropInError(400, f"{what} must be text.")
    return value


def _options(body: dict[str, Any]) -> tuple[int | None, Sampling, AskedCap | None]:
    """The request's num_ctx, sampling options and num_predict; unsupported inputs are refused, not
    silently dropped, and every option of the wrong type too, applied or not (issue 49, item 6)."""
    if body.get("format"):
        raise DropInError(400, "'format' is not supported by ollm-site's managed context.")
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise DropInError(400, "options must be an object.")
    flag_of(body.get("stream"), "stream")
    keep_alive = body.get("keep_alive")
    if keep_alive is not None and not isinstance(keep_alive, str):
        number_of(keep_alive, "keep_alive")
    think = body.get("think")
    if think is not None and not isinstance(think, str):
        flag_of(think, "think")
    for name, value in options.items():
        if name == "stop":
            stop_of(value, "options.stop")
        elif name in FLAG_OPTIONS:
            flag_of(value, f"options.{name}")
        elif name not in CHECKED_OPTIONS:
            number_of(value, f"options.{name}")
    num_ctx = num_ctx_of(options.get("num_ctx"), "options.num_ctx")
    return num_ctx, sampling_of(options, "options"), max_tokens_of(options.get("num_predict"), "options.num_predict")


def _messages(body: dict[str, Any]) -> list[ClientMessage]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise DropInError(400, "messages must be a list of {role, content} objects.")
    parsed = []
    for message in messages:
        if not isinstance(message, dict):
            raise DropInError(400, "messages must be a list of {role, content} objects.")
        if message.get("images"):
            raise DropInError(400, "images are not supported by ollm-site's managed context.")
        role = _text(message.get("role"), "a message's role")
        parsed.append(client_message(message, role, _text(message.get("content") or "", "a message's content")))
    return parsed


def _final(outcome: Answer, model: str) -> dict[str, Any]:
    """The last chunk's counts and durations, as Ollama reports them."""
    result = outcome.result
    prompt_ns = round(result.prompt_seconds * NANOSECONDS)
    eval_ns = round(result.generation_seconds * NANOSECONDS)
    return {
        "model": model,
        "created_at": _now(),
        "done": True,
        "done_reason": result.done_reason,
        "total_duration": prompt_ns + eval_ns,
        "load_duration": 0,
        "prompt_eval_count": result.prompt_tokens,
        "prompt_eval_duration": prompt_ns,
        "eval_count": result.completion_tokens,
        "eval_duration": eval_ns,
    }


def _answer(
    request: HttpRequest, caller: Caller, body: dict[str, Any], messages: list[ClientMessage], *, chat: bool
) -> HttpResponseBase:
    model = model_of(body)
    tools_checked(body.get("tools"))
    tools = tools_for(model, body.get("tools"), body.get("tool_choice"))
    num_ctx, sampling, max_tokens = _options(body)
    reply = reply_for(
        request,
        caller,
        model=model,
        messages=messages,
        num_ctx=num_ctx,
        sampling=sampling,
        max_tokens=max_tokens,
        tools=tools,
    )

    def piece(text: str, outcome: Answer | None = None) -> dict[str, Any]:
        if not chat:
            return {"response": text}
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if outcome is not None and outcome.result.tool_calls:
            # Ollama's shape: arguments as an object, and no id (its clients keep none).
            message["tool_calls"] = [
                {"function": {"name": c.name, "arguments": c.arguments}} for c in outcome.result.tool_calls
            ]
        return {"message": message}

    if body.get("stream", True) is False:
        outcome = reply.now()
        response: HttpResponseBase = JsonResponse({**_final(outcome, model), **piece(outcome.new_text, outcome)})
    else:
        response = StreamingHttpResponse(_ndjson(reply.stream(), model, piece), content_type="application/x-ndjson")
    if reply.session_id is not None:
        response[SESSION_HEADER] = str(reply.session_id)
    return response


async def _ndjson(stream: ReplyStream, model: str, piece: Any) -> AsyncIterator[bytes]:
    async with aclosing(stream.deltas()) as deltas:
        async for delta in deltas:
            yield _line({"model": model, "created_at": _now(), **piece(delta), "done": False})
    if stream.outcome is not None:
        if stream.outcome.result.tool_calls:
            # As Ollama streams them: in a chunk of their own, before the last.
            yield _line({"model": model, "created_at": _now(), **piece("", stream.outcome), "done": False})
        yield _line({**_final(stream.outcome, model), **piece("")})
    else:
        assert stream.error is not None
        # Ollama tells a failure after the stream began as a last line with "error".
        yield _line({"error": stream.error[1]})


def _line(chunk: dict[str, Any]) -> bytes:
    return (json.dumps(chunk) + "\n").encode()


def _loaded(body: dict[str, Any], *, chat: bool) -> HttpResponseBase:
    """What Ollama answers a request with nothing to answer (clients send one to load a model): done,
    ``done_reason`` "load"; no session is started."""
    model = model_of(body)
    _find_model(model)
    done = {"model": model, "created_at": _now(), "done": True, "done_reason": "load"}
    return JsonResponse({**done, **({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})})


@_post
def chat(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """POST /ollama/api/chat: the request's last message is answered in its session, or a background
    task apart (``reply_for``)."""
    body = json_body(request)
    if body.get("messages") == []:
        return _loaded(body, chat=True)
    return _answer(request, caller, body, _messages(body), chat=True)


@_post
def generate(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """POST /ollama/api/generate: ``prompt`` (with ``system``) is a user message; each call starts a
    session unless X-OLLM-Session names one to continue."""
    body = json_body(request)
    system = _text(body.get("system", ""), "system")
    prompt = _text(body.get("prompt", ""), "prompt")
    if body.get("images"):
        raise DropInError(400, "images are not supported by ollm-site's managed context.")
    context = body.get("context")
    if context is not None and (
        not isinstance(context, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in context)
    ):
        raise DropInError(400, "context must be a list of token ids (integers); it is not read here.")
    flag_of(body.get("raw"), "raw")
    for name in ("template", "suffix"):
        text_of(body.get(name), name)
    if not prompt:
        return _loaded(body, chat=False)
    messages = [ClientMessage("system", system)] if system.strip() else []
    return _answer(request, caller, body, [*messages, ClientMessage("user", prompt)], chat=False)


@_get
def tags(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """GET /ollama/api/tags: every model a backend serves now."""
    return JsonResponse({"models": [_model(info) for info in models_available()]})


@_get
def ps(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """GET /ollama/api/ps: the models that can answer now, with their context length."""
    return JsonResponse({
        "models": [
            {**_model(info), "expires_at": None, "size_vram": 0, "context_length": info.context_length}
            for info in models_available()
        ]
    })  # fmt: skip


@_post
def show(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """POST /ollama/api/show: a model's details."""
    body = json_body(request)
    info = _find_model(model_of({"model": body.get("model", body.get("name"))}))
    model_info: dict[str, Any] = {"general.architecture": info.family}
    if info.context_length:
        model_info[f"{info.family}.context_length"] = info.context_length
    return JsonResponse({
        "modelfile": "",
        "parameters": "",
        "template": "",
        "details": _details(info),
        "model_info": model_info,
        "capabilities": _capabilities(info),
        "modified_at": _now(),
    })  # fmt: skip


@_get
def version(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """GET /ollama/api/version."""
    return JsonResponse({"version": OLLAMA_API_VERSION})


@_get
def root(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """GET /ollama/: what Ollama answers there, for clients that check the server is up."""
    return HttpResponse("Ollama is running", content_type="text/plain")


urlpatterns = [
    path("", root),
    path("api/chat", chat),
    path("api/generate", generate),
    path("api/tags", tags),
    path("api/ps", ps),
    path("api/show", show),
    path("api/version", version),
    re_path(r"", unknown_route(_error)),
]
