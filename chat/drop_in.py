"""What the Ollama endpoint (chat.ollama_api) and the OpenAI one (chat.openai_api) share.

Both are for programs, not browsers: they accept only ``Authorization: Bearer <API token>`` (the
cookie of a logged-in browser is not enough, so no page can make a browser post to them, and
they need no CSRF token), read a JSON body within the REST API's size limit, map the request to
a session (chat.conversations) and stream the turn's reply as it comes. Each API writes its own
shapes and error shape; this module says which status an error is.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import suppress
from dataclasses import asdict
from functools import wraps
from typing import Any
from uuid import UUID

from django.core.exceptions import RequestDataTooBig, ValidationError
from django.http import Http404, HttpRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.services import api_token_authenticate
from chat.conversations import Conversation, conversation_reply
from chat.turn import ModelUnavailable, TurnOutcome
from contextmgr.core.client_history import ClientHistoryError
from contextmgr.core.config import ConfigError, sampling_config
from contextmgr.llm.types import BackendUnavailable, ContextOverflow, LLMError, LLMTimeout, Sampling

logger = logging.getLogger(__name__)
# Names the session a request continues; every answer names the session it went to.
SESSION_HEADER = "X-OLLM-Session"
# An answer's status and what it says, in the API's own error shape.
ErrorRenderer = Callable[[int, str], HttpResponseBase]
View = Callable[..., HttpResponseBase]


class DropInError(Exception):
    """A request refused with ``status``; the message is meant for the client's user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def bearer_user(request: HttpRequest) -> Any | None:
    """The owner of the request's API token, or None."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return api_token_authenticate(raw=token.strip())


def token_required(render_error: ErrorRenderer) -> Callable[[View], View]:
    """A view of the endpoint: 401 without a valid API token, its errors in the API's shape."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            user = bearer_user(request)
            if user is None:
                return render_error(401, "Send a valid API token as 'Authorization: Bearer <token>'.")
            try:
                return view(request, user, *args, **kwargs)
            except Exception as exc:
                status, message = failure(exc)
                return render_error(status, message)

        return wrapper

    return decorate


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's JSON object; a DropInError for anything else or a body over the REST API's limit."""
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise DropInError(413, "The request body is too large.") from exc
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise DropInError(400, f"The body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise DropInError(400, "The body must be a JSON object.")
    return body


def num_ctx_of(value: Any, where: str) -> int | None:
    """A client's context size (``where``: the field it came in), or None without one."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise DropInError(400, f"{where} must be a positive integer.")
    return value


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
    return request.headers.get("User-Agent", "").strip() or "unknown client"


def failure(exc: Exception) -> tuple[int, str]:
    """The status and message of an error, as the REST API answers the same error (500 for one it does
    not know, which is logged)."""
    if isinstance(exc, DropInError):
        return exc.status, str(exc)
    if isinstance(exc, ClientHistoryError):
        return 400, str(exc)
    if isinstance(exc, Http404):
        return 404, "No such session of yours."
    if isinstance(exc, ValidationError):
        fields = getattr(exc, "error_dict", {})
        return (404 if "model" in fields else 400), " ".join(exc.messages)
    if isinstance(exc, ModelUnavailable):
        return (503 if exc.backend_down else 404), str(exc)
    if isinstance(exc, ContextOverflow):
        return 413, str(exc)
    if isinstance(exc, BackendUnavailable):
        return 503, str(exc)
    if isinstance(exc, LLMTimeout):
        return 504, str(exc)
    if isinstance(exc, LLMError):
        return 502, str(exc)
    # Also after a stream began, the client hears of it in the API's own shape, not as a cut connection.
    logger.error("a drop-in request failed", exc_info=exc)
    return 500, "Internal error: the server could not answer; see its log."


class ReplyStream:
    """The turn's reply as it streams: iterate ``deltas()``, then read ``outcome``, or ``error`` when
    the turn failed (the user's message is stored by then). A client that goes away cancels the
    turn, which keeps the part of the reply it had (``turn_run``)."""

    def __init__(self, conversation: Conversation, sampling: Sampling) -> None:
        self.conversation = conversation
        self.sampling = sampling
        self.outcome: TurnOutcome | None = None
        self.error: tuple[int, str] | None = None

    async def deltas(self) -> AsyncGenerator[str]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def on_delta(delta: str) -> None:
            await queue.put(delta)

        task = asyncio.create_task(
            conversation_reply(conversation=self.conversation, sampling=self.sampling, on_delta=on_delta)
        )
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (delta := await queue.get()) is not None:
                yield delta
            try:
                self.outcome = task.result()
            except Exception as exc:
                self.error = failure(exc)
        finally:
            if not task.done():
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
