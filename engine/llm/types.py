"""The gateway's vocabulary: messages, results, model facts and errors a user can act on."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from engine.core.text import without_credentials, without_urls
from engine.core.window import PromptMessage


@dataclass(frozen=True)
class ToolCall:
    """A call of one of the request's tools the model made: ``arguments`` as an object (Ollama's
    shape; OpenAI's clients get them as JSON text). ``id`` links the call to its result; Ollama gives
    none, the turn that stores the call names it."""

    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class ChatMessage:
    """A message of the prompt; an assistant's may carry ``tool_calls`` (its text may then be empty),
    a ``tool`` message is the result of the call ``tool_call_id`` of the tool ``tool_name``."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_name: str = ""
    tool_call_id: str = ""

    @classmethod
    def of(cls, message: PromptMessage) -> ChatMessage:
        """A message of the window's prompt (``prompt_messages``); a call's arguments an object, which
        Ollama takes only (arguments an imported file held as text that is no JSON object are left out)."""
        calls = tuple(
            ToolCall(c.name, c.arguments if isinstance(c.arguments, dict) else {}, c.id) for c in message.tool_calls
        )
        return cls(message.role, message.content, calls, message.tool_name, message.tool_call_id)


@dataclass(frozen=True)
class Sampling:
    """How the next token is picked. A field left None is the server's default: Ollama's (and the
    bundled model server's) are temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1 over the
    last 64 tokens."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    seed: int | None = None

    def options(self) -> dict[str, Any]:
        """The fields that are set, as Ollama's ``options``."""
        return {name: value for name, value in asdict(self).items() if value is not None}


# Whatever the server does when a request sets nothing.
SERVER_DEFAULTS = Sampling()
# Summaries and the tests that compare outputs: the most likely token each time.
GREEDY = Sampling(temperature=0.0)


@dataclass(frozen=True)
class ChatRequest:
    """One model call: what is asked, of which model, within which context and reply size.
    ``background`` marks summaries, aging and merges, which wait for chat turns."""

    messages: Sequence[ChatMessage]
    model: str
    num_ctx: int
    max_tokens: int
    sampling: Sampling = SERVER_DEFAULTS
    stop: Sequence[str] = ()
    background: bool = False
    # Tool definitions (``{"type": "function", "function": {name, description, parameters}}``), only
    # for a model with the "tools" capability: the model may answer with calls of them (``ChatResult``).
    tools: Sequence[dict[str, Any]] = ()


@dataclass(frozen=True)
class ChatResult:
    """The end of a reply: exact counts as the backend reports them, and timings in seconds."""

    prompt_tokens: int
    completion_tokens: int
    done_reason: str  # "stop", "length" or "cancelled"
    prompt_seconds: float
    generation_seconds: float
    backend: str
    model: str
    # Set when the server reported well fewer prompt tokens than the gateway's count of what it
    # sent (``core.tokens.prompt_truncated``): it evaluated only part of the prompt.
    sent_prompt_tokens: int | None = None
    # The calls of the request's tools the model answered with (besides its text, which may be empty).
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def prompt_truncated(self) -> bool:
        return self.sent_prompt_tokens is not None

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.generation_seconds if self.generation_seconds > 0 else 0.0


@dataclass(frozen=True)
class Completion:
    text: str
    result: ChatResult


@dataclass(frozen=True)
class ModelInfo:
    name: str
    backend: str
    parameter_size_b: float | None
    context_length: int | None
    family: str
    # What the model does, in Ollama's words ("completion", "tools", "vision", "embedding"…).
    capabilities: tuple[str, ...] = ("completion",)


@dataclass(frozen=True)
class QueueState:
    running: int
    queued_turns: int
    queued_background: int
    served: int
    # Since this process started: the longest a background request waited for its slot.
    longest_background_wait: float


@dataclass(frozen=True)
class Failure:
    at: float  # time.time()
    error: str


@dataclass(frozen=True)
class HostReport:
    """One model host as ``/api/hosts`` shows it: ``served`` the requests it answered whole, ``failed``
    those that failed on it (for want of the host), counted apart."""

    url: str
    backend: str  # "embedded" or "ollama"
    up: bool
    models: tuple[str, ...]
    state: QueueState
    failures: tuple[Failure, ...]
    served: int = 0
    failed: int = 0


@dataclass(frozen=True)
class HostAttempt:
    """A host a request was sent to, and why it failed there."""

    url: str
    error: str


class LLMError(Exception):
    """Base of every gateway error; the message is meant for the user and names no host.
    ``operator_detail``, when set, is the same for staff and the log: which hosts, and why."""

    operator_detail: str = ""

    def shown_to(self, *, staff: bool) -> str:
        """The error as a user sees it; staff also see the hosts (never their credentials)."""
        if staff and self.operator_detail:
            return without_credentials(f"{self} ({self.operator_detail})")
        return str(self) if staff else without_urls(str(self))


class BackendUnavailable(LLMError):
    pass


class ModelNotFound(LLMError):
    pass


class ContextOverflow(LLMError):
    pass


class LLMTimeout(LLMError):
    pass


class LLMRequestError(LLMError):
    pass


class ConnectionLost(LLMRequestError):
    """The host went away mid-reply (it stopped, or the network between broke)."""


class HostFailed(LLMRequestError):
    """The host answered with a server error (5xx): another host may serve the request."""


def _attempts_text(attempts: Sequence[HostAttempt]) -> str:
    return "; ".join(f"{a.url}: {a.error}" for a in attempts)


class NoHostAnswered(BackendUnavailable):
    """Every host that may serve the model failed before a token of the reply: ``attempts`` says
    which and why (for staff and the log; the message itself names none)."""

    def __init__(self, message: str, attempts: Sequence[HostAttempt]) -> None:
        super().__init__(message)
        self.attempts = tuple(attempts)
        self.operator_detail = f"hosts tried: {_attempts_text(self.attempts)}"


class ReplyCut(ConnectionLost):
    """The host failed after part of the reply had reached the client: the part is kept, marked as cut."""

    def __init__(self, message: str, attempts: Sequence[HostAttempt]) -> None:
        super().__init__(message)
        self.attempts = tuple(attempts)
        self.operator_detail = f"hosts tried: {_attempts_text(self.attempts)}"


class ChatStream:
    """An async iterator of text deltas; ``result`` is set once the reply has ended.

    Closing it early (``aclose``) cancels the generation.
    """

    def __init__(self, parts: AsyncGenerator[str | ChatResult, None]) -> None:
        self._parts = parts
        self.result: ChatResult | None = None

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> str:
        part = await self._parts.__anext__()
        if isinstance(part, ChatResult):
            self.result = part
            await self._parts.aclose()
            raise StopAsyncIteration
        return part

    async def aclose(self) -> None:
        await self._parts.aclose()

    async def collect(self) -> Completion:
        text = "".join([delta async for delta in self])
        if self.result is None:
            raise LLMRequestError("the reply ended without its final counts")
        return Completion(text=text, result=self.result)


class LLMBackend(Protocol):
    name: str

    def chat(self, request: ChatRequest) -> ChatStream: ...

    async def list_models(self) -> list[ModelInfo]: ...

    async def model_info(self, model: str) -> ModelInfo: ...

    async def count_tokens(self, text: str, model: str) -> int | None: ...

    async def health(self) -> bool: ...
