"""What the Ollama endpoint (chat.dropin.ollama_api) and the OpenAI one (chat.dropin.openai_api) share.

Both are for programs, not browsers: they accept only ``Authorization: Bearer <API token>`` (the
cookie of a logged-in browser is not enough, so no page can make a browser post to them, and
they need no CSRF token; with ``OLLM_LOOPBACK_USER`` set, a request without the header from this
machine acts as that user), read a JSON body within the REST API's size limit, map the request to
a session (chat.services.conversations) and stream the turn's reply as it comes. Each API writes its own
shapes and error shape; this module says which status an error is.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from functools import wraps
from typing import Any, Protocol
from uuid import UUID

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, ValidationError
from django.http import Http404, HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.models import ApiToken
from accounts.selectors import loopback_user
from accounts.services import api_token_use
from chat.formats.file_checks import ImportTooLarge, json_load
from chat.selectors.sessions import ModelUnavailable, model_takes_tools
from chat.services.client_tasks import ClientTaskRequest, client_task_answer, client_task_check
from chat.services.conversations import conversation_answer, conversation_reply, conversation_resolve
from chat.services.turn import OnDelta
from engine.core.client_history import ClientHistoryError, ClientMessage, ClientToolCall, client_request
from engine.core.client_tasks import client_label, task_kind
from engine.core.config import MAX_CONTEXT_TOKENS, ConfigError, reply_max_tokens, sampling_config
from engine.llm.types import BackendUnavailable, ChatResult, ContextOverflow, LLMError, LLMTimeout, Sampling

logger = logging.getLogger(__name__)
# Names the session a request continues; every answer names the session it went to.
SESSION_HEADER = "X-OLLM-Session"
# An answer's status, what it says and which fault it is (``Fault``), in the API's own error shape.
ErrorRenderer = Callable[[int, str, "str | None"], HttpResponseBase]
View = Callable[..., HttpResponseBase]


class Fault:
    """What went wrong, for an API that names it besides the status (OpenAI's ``code``): two 404s, a
    model and a session, must not read alike."""

    MODEL_NOT_FOUND = "model_not_found"
    SESSION_NOT_FOUND = "session_not_found"
    CONTEXT_LENGTH = "context_length_exceeded"
    INVALID_API_KEY = "invalid_api_key"
    UNKNOWN_URL = "unknown_url"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    TOOL_CHOICE = "tool_choice_not_supported"


# The same fault reads the same on both APIs.
MODEL_REQUIRED = "model is required."
NO_SUCH_SESSION = "No such session of yours."


class DropInError(Exception):
    """A request refused with ``status``; the message is meant for the client's user, ``fault`` names
    it for an API that says which fault it is."""

    def __init__(self, status: int, message: str, fault: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.fault = fault


class InSession(Exception):
    """A request's failure (its ``__cause__``) once it was mapped to session ``session_id``: the
    answer names the session its message went to, as a successful one does."""

    def __init__(self, session_id: UUID) -> None:
        super().__init__(str(session_id))
        self.session_id = session_id


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the owner of its API token, and the token."""

    user: Any
    token: ApiToken | None


def bearer_caller(request: HttpRequest) -> Caller | None:
    """The owner of the request's API token and the token, or None without a valid one."""
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return None
    token = api_token_use(raw=raw.strip())
    return Caller(token.user, token) if token is not None else None


def _from_this_machine(request: HttpRequest) -> bool:
    """The request's peer is a loopback address; REMOTE_ADDR only, which a client cannot write (an
    X-Forwarded-For header it can)."""
    try:
        address = ipaddress.ip_address(str(request.META.get("REMOTE_ADDR", "")))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def request_caller(request: HttpRequest) -> Caller | None:
    """Who sent the request: the owner of its API token; without an Authorization header, from this
    machine and with ``OLLM_LOOPBACK_USER`` set, that user (no token); else None (401)."""
    if "Authorization" in request.headers or not _from_this_machine(request):
        return bearer_caller(request)
    user = loopback_user()
    return Caller(user, None) if user is not None else None


def _no_token(render_error: ErrorRenderer) -> HttpResponseBase:
    return render_error(401, "Send a valid API token as 'Authorization: Bearer <token>'.", Fault.INVALID_API_KEY)


def endpoint(render_error: ErrorRenderer, *methods: str) -> Callable[[View], View]:
    """A view of the endpoint, answering ``methods``: 405 for any other, 401 without a valid API token,
    every error in the API's shape (with the session it went to, once there is one)."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method not in methods:
                response = render_error(
                    405, f"Method {request.method} is not allowed here; use {', '.join(methods)}.",
                    Fault.METHOD_NOT_ALLOWED,
                )  # fmt: skip
                response["Allow"] = ", ".join(methods)
                return response
            caller = request_caller(request)
            if caller is None:
                return _no_token(render_error)
            try:
                return view(request, caller, *args, **kwargs)
            except InSession as exc:
                cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
                response = render_error(*failure(cause, staff=_is_staff(caller.user)))
                response[SESSION_HEADER] = str(exc.session_id)
                return response
            except Exception as exc:
                return render_error(*failure(exc, staff=_is_staff(caller.user)))

        return wrapper

    return decorate


def unknown_route(render_error: ErrorRenderer) -> View:
    """What answers every other path under the API: 404 in its shape, not the site's page; 401 first
    without a valid token, as every route of the API (a probe learns nothing of its routes)."""

    @csrf_exempt
    def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request_caller(request) is None:
            return _no_token(render_error)
        return render_error(404, f"No route {request.path} here.", Fault.UNKNOWN_URL)

    return view


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's JSON object; a DropInError for anything else, or a body over the REST import's limits
    of size (413) and nesting, or holding NaN or Infinity (400)."""
    try:
        body = json_load(request.body or b"{}", what="body", checked=False)
    except (RequestDataTooBig, ImportTooLarge) as exc:
        raise DropInError(413, "The request body is too large.") from exc
    except ValidationError as exc:
        raise DropInError(400, " ".join(exc.messages)) from exc
    if not isinstance(body, dict):
        raise DropInError(400, "The body must be a JSON object.")
    return body


# Why a required tool choice cannot be met.
NO_TOOLS_CAPABILITY = (
    'this model answers through ollm-site\'s managed context as text only (it has no "tools" capability)'
)


def tools_answered_as_text(
    tools: Any, tool_choice: Any, where: str = "tool_choice", why: str = NO_TOOLS_CAPABILITY
) -> None:
    """Accept a request's ``tools`` when it lets the model answer without calling one, for a model that
    is given no tools (it has no "tools" capability): the reply is text, as it is from a model that calls
    none. Open WebUI sends its builtin tools on every chat, with no ``tool_choice``. A choice that requires
    a call (``"required"``, a named function) cannot be met and is refused, not ignored."""
    if tools is not None and not isinstance(tools, list):
        raise DropInError(400, f"{TOOLS_SHAPE}.")
    if tool_choice in (None, "auto", "none"):
        return
    raise DropInError(
        400,
        f'{where} {json.dumps(tool_choice)} requires a tool call, and {why}: send no {where}, "auto" or "none".',
        Fault.TOOL_CHOICE,
    )


TOOLS_SHAPE = 'tools must be a list of {type: "function", function: {name, description?, parameters?}} objects'


def tools_for(model: str, tools: Any, tool_choice: Any) -> tuple[dict[str, Any], ...]:
    """The tool definitions the model is given for a request (in the function shape: ``tools_checked``
    first): its ``tools`` when the model has the "tools"
    capability (``model_takes_tools``) and ``tool_choice`` is not "none"; none for any other model, whose
    reply is text (``tools_answered_as_text``, which refuses a choice that requires a call). A required
    choice cannot be enforced on a model that takes tools (Ollama has no such field): it may still answer
    as text."""
    if not tools or not model_takes_tools(model=model):
        tools_answered_as_text(tools, tool_choice)
        return ()
    return () if tool_choice == "none" else tuple(tools)


def client_message(message: dict[str, Any], role: str, content: str) -> ClientMessage:
    """A message of the client's history with its tool fields, as either API sends them: an assistant's
    ``tool_calls`` (``{id?, function: {name, arguments}}``), a tool result's ``tool_call_id`` (OpenAI) or
    ``tool_name`` (Ollama)."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise DropInError(400, "tool_calls must be a list of {function: {name, arguments}} objects.")
    parsed = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise DropInError(400, "tool_calls must be a list of {function: {name, arguments}} objects.")
        parsed.append(ClientToolCall(str(call.get("id") or ""), function["name"], function.get("arguments")))
    tool_call_id, tool_name = message.get("tool_call_id") or "", message.get("tool_name") or ""
    if not isinstance(tool_call_id, str) or not isinstance(tool_name, str):
        raise DropInError(400, "a tool message's tool_call_id and tool_name must be text.")
    return ClientMessage(role, content, tuple(parsed), tool_call_id, tool_name)


def num_ctx_of(value: Any, where: str) -> int | None:
    """A client's context size (``where``: the field it came in), or None without one."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_CONTEXT_TOKENS:
        raise DropInError(400, f"{where} must be a positive integer of at most {MAX_CONTEXT_TOKENS:,}.")
    return value


@dataclass(frozen=True)
class AskedCap:
    """A request's cap on its reply: ``tokens``, asked in the field ``field`` (named when it is refused)."""

    tokens: int
    field: str


def max_tokens_of(value: Any, where: str) -> AskedCap | None:
    """A request's cap on its reply (``where``: the field it came in), None without one: a positive integer
    of at most MAX_CONTEXT_TOKENS (no reply is longer than the largest context), or a 400; Ollama's
    num_predict -1 (no cap) is refused rather than read as a cap nobody asked for. ``reply_for`` holds it
    to the reply cap and passes it to the model call: the reply stops there (``finish_reason``/
    ``done_reason`` "length")."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_CONTEXT_TOKENS:
        raise DropInError(400, f"{where} must be a positive integer of at most {MAX_CONTEXT_TOKENS:,}.")
    return AskedCap(value, where)


def sampling_of(values: dict[str, Any], where: str) -> Sampling:
    """The sampling options among ``values`` (a request's options; ``where``: the object they came in,
    "" for the body itself), checked as a session's settings are; what they leave out is the session's."""
    try:
        return Sampling(**asdict(sampling_config(values, where=where)))
    except ConfigError as exc:
        raise DropInError(400, f"{exc}.") from exc


def requested_session(request: HttpRequest) -> UUID | None:
    """The session the X-OLLM-Session header names, if it does."""
    value = request.headers.get(SESSION_HEADER, "").strip()
    if not value:
        return None
    try:
        return UUID(value)
    except ValueError as exc:
        raise DropInError(400, f"{SESSION_HEADER} must be a session id (a UUID), not {value!r}.") from exc


def client_name(request: HttpRequest) -> str:
    """The name the request's client is shown by (``client_label``)."""
    return client_label(request.headers.get("User-Agent", ""), request.headers.keys())


def _is_staff(user: Any) -> bool:
    return bool(getattr(user, "is_staff", False))


def failure(exc: Exception, *, staff: bool = False) -> tuple[int, str, str | None]:
    """The status, message and fault of an error, as the REST API answers the same error (500 for one
    it does not know, which is logged). A model's error names its hosts to ``staff`` only."""
    status, text, fault = _failure(exc)
    return status, exc.shown_to(staff=staff) if isinstance(exc, LLMError) else text, fault


def _failure(exc: Exception) -> tuple[int, str, str | None]:
    if isinstance(exc, DropInError):
        return exc.status, str(exc), exc.fault
    if isinstance(exc, ClientHistoryError):
        return 400, str(exc), None
    if isinstance(exc, Http404):
        return 404, NO_SUCH_SESSION, Fault.SESSION_NOT_FOUND
    if isinstance(exc, ValidationError):
        if "model" in getattr(exc, "error_dict", {}):
            return 404, " ".join(exc.messages), Fault.MODEL_NOT_FOUND
        return 400, " ".join(exc.messages), None
    if isinstance(exc, ModelUnavailable):
        return (503, str(exc), None) if exc.backend_down else (404, str(exc), Fault.MODEL_NOT_FOUND)
    if isinstance(exc, ContextOverflow):
        return 413, str(exc), Fault.CONTEXT_LENGTH
    if isinstance(exc, BackendUnavailable):
        return 503, str(exc), None
    if isinstance(exc, LLMTimeout):
        return 504, str(exc), None
    if isinstance(exc, LLMError):
        return 502, str(exc), None
    # Also after a stream began, the client hears of it in the API's own shape, not as a cut connection.
    logger.error("a drop-in request failed", exc_info=exc)
    return 500, "Internal error: the server could not answer; see its log.", None


def model_of(body: dict[str, Any]) -> str:
    """The request's model name; the same refusal on both APIs without one."""
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise DropInError(400, MODEL_REQUIRED)
    return model.strip()


class Answer(Protocol):
    """What the endpoints write of an answer, a turn's (``TurnOutcome``) or a background task's."""

    @property
    def new_text(self) -> str: ...

    @property
    def result(self) -> ChatResult: ...


# Answers the request, handing what streams to its callback.
Answering = Callable[[OnDelta | None], Coroutine[Any, Any, Answer]]


@dataclass(frozen=True)
class Reply:
    """How a request is answered: a turn of session ``session_id``, or a background task (None)."""

    answer: Answering
    session_id: UUID | None
    staff: bool = False  # its caller is staff: a model's error names the hosts
    # A turn's answer when it does not stream: the synchronous turn, called as it is (``conversation_answer``).
    answer_now: Callable[[], Answer] | None = None

    def now(self) -> Answer:
        """The answer to a request that does not stream; a turn's failure names the session it went to."""

        async def answered() -> Answer:
            return await self.answer(None)

        try:
            return self.answer_now() if self.answer_now is not None else async_to_sync(answered)()
        except Exception as exc:
            if self.session_id is None:
                raise
            raise InSession(self.session_id) from exc

    def stream(self) -> ReplyStream:
        return ReplyStream(self.answer, staff=self.staff)


def reply_for(
    request: HttpRequest,
    caller: Caller,
    *,
    model: str,
    messages: Sequence[ClientMessage],
    num_ctx: int | None,
    sampling: Sampling,
    max_tokens: AskedCap | None = None,
    tools: Sequence[dict[str, Any]] = (),
) -> Reply:
    """How to answer ``messages``: as a background task when they are one (``task_kind``) and the
    token keeps its client's tasks apart, and no session is named; else as the turn of the session
    they continue or start (``conversation_resolve``), with ``tools`` (``tools_for``) the model may call.
    ``max_tokens`` (``max_tokens_of``) caps the answer: a turn's must be within the reply cap
    (``OLLM_REPLY_MAX_TOKENS``; 400 before anything is stored), and a smaller session's cap (15% of its
    context) still applies; a task's is held under the task cap (Open WebUI asks 1,000 for a title)."""
    kind = task_kind(messages)
    named = requested_session(request)
    if kind is not None and named is None and (caller.token is None or caller.token.tasks_apart):
        task = ClientTaskRequest(
            owner=caller.user,
            token=caller.token,
            client=client_name(request),
            kind=kind,
            model=model,
            messages=tuple(messages),
            num_ctx=num_ctx,
            sampling=sampling,
            max_tokens=max_tokens.tokens if max_tokens is not None else None,
        )
        client_task_check(request=task)
        return Reply(
            lambda on_delta: client_task_answer(request=task, on_delta=on_delta), None, staff=_is_staff(caller.user)
        )
    cap = reply_max_tokens(MAX_CONTEXT_TOKENS, settings.OLLM_REPLY_MAX_TOKENS)
    if max_tokens is not None and max_tokens.tokens > cap:
        raise DropInError(400, f"{max_tokens.field} must be a positive integer of at most {cap:,} (the reply cap).")
    conversation = conversation_resolve(
        owner=caller.user,
        model=model,
        request=client_request(list(messages)),
        client=client_name(request),
        num_ctx=num_ctx,
        session_id=named,
    )
    cap_asked = max_tokens.tokens if max_tokens is not None else None
    return Reply(
        lambda on_delta: conversation_reply(
            conversation=conversation, sampling=sampling, on_delta=on_delta, tools=tools, max_tokens=cap_asked
        ),
        conversation.session.pk,
        staff=_is_staff(caller.user),
        answer_now=lambda: conversation_answer(
            conversation=conversation, sampling=sampling, tools=tools, max_tokens=cap_asked
        ),
    )


class ReplyStream:
    """The reply as it streams: iterate ``deltas()``, then read ``outcome``, or ``error`` when
    it failed (a turn's user message is stored by then). A client that goes away cancels the
    answer; a turn keeps the part of the reply it had (``turn_take``)."""

    def __init__(self, answer: Answering, *, staff: bool = False) -> None:
        self.answer = answer
        self.staff = staff
        self.outcome: Answer | None = None
        self.error: tuple[int, str, str | None] | None = None

    async def deltas(self) -> AsyncGenerator[str]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def on_delta(delta: str) -> None:
            await queue.put(delta)

        task = asyncio.create_task(self.answer(on_delta))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (delta := await queue.get()) is not None:
                yield delta
            try:
                self.outcome = task.result()
            except Exception as exc:
                self.error = failure(exc, staff=self.staff)
        finally:
            if not task.done():
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
