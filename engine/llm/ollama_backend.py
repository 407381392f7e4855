"""The Ollama backend, over the official ``ollama`` client.

Every call sends ``options.num_ctx``: Ollama silently truncates a longer
prompt, so the caller's budget must hold before the call. Client errors become
the gateway's own, with a message that says what to do.
"""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import ollama

from engine.core.reliability import parameter_size_from_tag
from engine.core.text import without_credentials
from engine.llm.types import (
    BackendUnavailable,
    ChatMessage,
    ChatRequest,
    ChatResult,
    ChatStream,
    ConnectionLost,
    ContextOverflow,
    HostFailed,
    LLMError,
    LLMRequestError,
    LLMTimeout,
    ModelInfo,
    ModelNotFound,
    ToolCall,
)

NS = 1e-9
# Marks a summary or an aging call: the bundled model server serves chat turns first; Ollama ignores it.
PRIORITY_HEADER = "X-Ollm-Priority"


def wire_message(message: ChatMessage) -> dict[str, Any]:
    """A prompt message as Ollama's API takes it: an assistant's ``tool_calls`` as
    ``{function: {name, arguments}}``, a tool result with the ``tool_name`` it answers."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in message.tool_calls]
    if message.tool_name:
        wire["tool_name"] = message.tool_name
    return wire


def _tool_calls(message: Any) -> list[ToolCall]:
    """The tool calls of a chunk's message, if it has any."""
    calls = []
    for call in getattr(message, "tool_calls", None) or ():
        arguments = call.function.arguments
        calls.append(ToolCall(str(call.function.name), dict(arguments or {}), str(getattr(call, "id", "") or "")))
    return calls


def parse_parameter_size(text: str | None) -> float | None:
    """Ollama's ``details.parameter_size`` ("3.2B", "135M") in billions."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMBT])\s*", text or "", re.I)
    if match is None:
        return None
    scale = {"K": 1e-6, "M": 1e-3, "B": 1.0, "T": 1e3}[match.group(2).upper()]
    return float(match.group(1)) * scale


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificates every client of this process verifies a host with (httpx's defaults), loaded once:
    each turn's event loop opens clients of its own, and loading them took about 28 ms a client."""
    return httpx.create_ssl_context()


class OllamaBackend:
    name = "ollama"
    label = "Ollama"

    def __init__(self, *, host: str, timeout: float = 120.0, connect_timeout: float = 3.0) -> None:
        self.host = host
        # The host as messages and pages show it: without the credentials its URL may carry.
        self.shown_host = without_credentials(host)
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        # httpx connections belong to the event loop that opened them, and this
        # backend is called from several (the server's, and the ones async_to_sync
        # makes in worker threads): one client per loop, and per priority.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[bool, ollama.AsyncClient]] = (
            weakref.WeakKeyDictionary()
        )

    def _client_for(self, *, background: bool) -> ollama.AsyncClient:
        clients = self._clients.setdefault(asyncio.get_running_loop(), {})
        client = clients.get(background)
        if client is None:
            headers = {PRIORITY_HEADER: "background"} if background else {}
            client = clients[background] = ollama.AsyncClient(
                host=self.host, timeout=self._timeout, headers=headers, verify=tls_context()
            )
        return client

    @property
    def _client(self) -> ollama.AsyncClient:
        return self._client_for(background=False)

    def unreachable(self) -> str:
        return f"Ollama is not reachable at {self.shown_host}: start it with `ollama serve` or set OLLAMA_HOST"

    @asynccontextmanager
    async def _errors(self, model: str | None = None) -> AsyncIterator[None]:
        try:
            yield
        except LLMError:
            raise
        except ollama.ResponseError as exc:
            if exc.status_code == 404 and model is not None:
                raise ModelNotFound(f"model {model} is not pulled; run `ollama pull {model}`") from exc
            if exc.status_code == 413:
                raise ContextOverflow(exc.error) from exc
            if exc.status_code >= 500:
                # The host's own failure (it may be overloaded or broken): another host may answer.
                raise HostFailed(f"{self.label} refused the request ({exc.status_code}): {exc.error}") from exc
            raise LLMRequestError(f"{self.label} refused the request ({exc.status_code}): {exc.error}") from exc
        except (ConnectionError, httpx.ConnectError) as exc:
            raise BackendUnavailable(self.unreachable()) from exc
        except httpx.TimeoutException as exc:
            raise LLMTimeout(f"{self.label} at {self.shown_host} did not answer in time") from exc
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise ConnectionLost(
                f"the connection to {self.label} at {self.shown_host} broke off mid-reply; Retry asks again"
            ) from exc

    def chat(self, request: ChatRequest) -> ChatStream:
        """A reply; a ``background`` request (a summary or an aging call) may wait for chat turns.
        What its ``sampling`` leaves unset is the server's default."""
        options: dict[str, Any] = {
            "num_ctx": request.num_ctx,
            "num_predict": request.max_tokens,
            **request.sampling.options(),
        }
        if request.stop:
            options["stop"] = list(request.stop)
        payload = [wire_message(m) for m in request.messages]
        tools = list(request.tools) or None
        return ChatStream(self._stream(payload, request.model, options, tools, background=request.background))

    async def _stream(
        self,
        messages: list[dict[str, Any]],
        model: str,
        options: dict[str, Any],
        tools: list[dict[str, Any]] | None,
        *,
        background: bool,
    ) -> AsyncGenerator[str | ChatResult, None]:
        started = time.perf_counter()
        calls: list[ToolCall] = []
        async with self._errors(model):
            client = self._client_for(background=background)
            parts = await client.chat(model=model, messages=messages, tools=tools, stream=True, options=options)
            async for part in parts:
                if part.message.content:
                    yield part.message.content
                # Ollama sends a reply's tool calls in a chunk of their own, before the last.
                calls += _tool_calls(part.message)
                if part.done:
                    yield ChatResult(
                        prompt_tokens=part.prompt_eval_count or 0,
                        completion_tokens=part.eval_count or 0,
                        done_reason=part.done_reason or "stop",
                        prompt_seconds=(part.prompt_eval_duration or 0) * NS,
                        generation_seconds=(part.eval_duration or 0) * NS,
                        backend=self.name,
                        model=model,
                        tool_calls=tuple(calls),
                    )
                    return
            raise ConnectionLost(
                f"{self.label} at {self.shown_host} ended the reply after {time.perf_counter() - started:.1f} s "
                "without finishing it"
            )

    async def list_models(self) -> list[ModelInfo]:
        async with self._errors():
            listed = await self._client.list()
        return [await self.model_info(entry.model) for entry in listed.models if entry.model]

    async def list_model_names(self) -> list[str]:
        """Every model the host lists, whatever its name (``/api/tags``; nothing asked of each)."""
        async with self._errors():
            listed = await self._client.list()
        return [str(entry.model or getattr(entry, "name", "") or "") for entry in listed.models]

    async def model_info(self, model: str) -> ModelInfo:
        async with self._errors(model):
            shown = await self._client.show(model)
        details = shown.details
        info = dict(shown.modelinfo or {})
        architecture = str(info.get("general.architecture") or (details.family if details else "") or "")
        context = info.get(f"{architecture}.context_length")
        size = parse_parameter_size(details.parameter_size if details else None)
        return ModelInfo(
            name=model,
            backend=self.name,
            parameter_size_b=size if size is not None else parameter_size_from_tag(model),
            context_length=int(context) if context else None,
            family=(details.family if details and details.family else architecture),
            # An Ollama older than capabilities in /api/show serves only completion models.
            capabilities=tuple(shown.capabilities or ("completion",)),
        )

    async def count_tokens(self, text: str, model: str) -> int | None:
        """Ollama has no tokenize endpoint: exact counts come from ``prompt_eval_count`` after a call."""
        return None

    async def health(self) -> bool:
        try:
            async with self._errors():
                await self._client.list()
        except LLMError:
            return False
        return True
