"""The app as its clients reach it, in this process: the REST API and the chat websocket through the
real ASGI application (routing, middleware, auth, ninja, Channels), and the backend called straight.

Everything shares one event loop and one embedded backend (``get_gateway()``'s, the client of
the benchmark's model server), so the only difference between the paths is the app's own work.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from channels.testing import HttpCommunicator, WebsocketCommunicator
from django.test import Client

from accounts.services import api_token_create
from engine.llm import GREEDY, ChatMessage, ChatRequest, ChatResult, ChatStream
from engine.llm.embedded import EmbeddedBackend
from ollm_site.asgi import application

TIMEOUT = 600
# The frame that ends a websocket turn: the stored reply, with the page told that nothing streams any more
# (the meter alone comes earlier too, with the stored question).
TURN_DONE = '<div id="turn-state" data-streaming="0"'
TOKEN_FRAME = 'hx-swap-oob="beforeend">'
# The frame that appends messages written elsewhere (an API turn's) to what a page shows.
APPENDED = 'id="history" hx-swap-oob="beforeend"'


def session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def bearer(user: Any) -> bytes:
    return f"Bearer {api_token_create(user=user, name='bench')[1]}".encode()


@dataclass
class Timed:
    seconds: float
    # perf_counter times of the frames that carried reply tokens (websocket only).
    token_times: list[float] = field(default_factory=list)


async def api_turn(session_id: Any, authorization: bytes, content: str) -> Timed:
    """POST /api/sessions/{id}/messages and read the whole answer."""
    answer = await http_post_timed(f"/api/sessions/{session_id}/messages", authorization, {"content": content})
    assert answer.status == 200, answer.body
    return answer.timed


async def ws_connect(session_id: Any, cookie: bytes) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/",
        headers=[(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)],
    )
    connected, code = await communicator.connect(timeout=TIMEOUT)
    assert connected, code
    return communicator


async def ws_turn(communicator: WebsocketCommunicator, content: str) -> Timed:
    """Send the form's frame and read every frame up to the one that closes the turn."""
    token_times = []
    started = time.perf_counter()
    await communicator.send_to(text_data=json.dumps({"action": "send", "message": content}))
    while True:
        frame = await communicator.receive_from(timeout=TIMEOUT)
        now = time.perf_counter()
        if TOKEN_FRAME in frame and "-body" in frame:
            token_times.append(now)
        if TURN_DONE in frame:
            return Timed(now - started, token_times)
        assert 'class="status error"' not in frame, frame


async def page_appended(communicator: WebsocketCommunicator) -> None:
    """Read a page's frames up to the one that appends the messages an API turn wrote: the page's own work
    for that turn (its rendering, in this process) is over before anything else is measured."""
    while APPENDED not in await communicator.receive_from(timeout=TIMEOUT):
        pass


async def direct_turn(
    chat: Callable[[ChatRequest], ChatStream],
    messages: Sequence[ChatMessage],
    *,
    model: str,
    num_ctx: int,
    max_tokens: int,
) -> tuple[Timed, ChatResult]:
    """The same prompt straight to the backend object the app uses (its ``chat``), the reply read to the end."""
    started = time.perf_counter()
    token_times = []
    stream = chat(ChatRequest(messages, model=model, num_ctx=num_ctx, max_tokens=max_tokens, sampling=GREEDY))
    try:
        async for _delta in stream:
            token_times.append(time.perf_counter())
    finally:
        await stream.aclose()
    seconds = time.perf_counter() - started
    assert stream.result is not None
    return Timed(seconds, token_times), stream.result


class RecordingBackend:
    """Wraps the backend's ``chat`` to keep the messages of every call (to check the app sent the
    prompt the direct path sends) and the last reply's final counts."""

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.backend = backend
        self.calls: list[list[ChatMessage]] = []
        self._last: ChatStream | None = None
        self._chat = backend.chat
        backend.chat = self._record  # type: ignore[method-assign]

    def _record(self, request: ChatRequest) -> ChatStream:
        self.calls.append(list(request.messages))
        self._last = self._chat(request)
        return self._last

    @property
    def last_result(self) -> ChatResult | None:
        """The final counts of the last recorded reply once it ended: the model server's own, as it sent them."""
        return self._last.result if self._last is not None else None

    @property
    def direct(self) -> Callable[[ChatRequest], ChatStream]:
        """The backend's own ``chat``, unrecorded."""
        return self._chat


@dataclass
class HttpAnswer:
    """A response read chunk by chunk as its client reads it."""

    timed: Timed  # seconds: up to the last chunk; token_times: the chunks that carried reply text
    status: int
    headers: dict[str, str]
    body: bytes


async def http_post_timed(
    path: str,
    authorization: bytes,
    payload: dict[str, Any],
    *,
    headers: Sequence[tuple[bytes, bytes]] = (),
    carries_text: Callable[[bytes], bool] | None = None,
) -> HttpAnswer:
    """POST ``payload`` as JSON through the ASGI application and read the answer chunk by chunk;
    ``carries_text`` says which chunks hold reply text (a streamed answer's first token)."""
    body = json.dumps(payload).encode()
    communicator = HttpCommunicator(
        application,
        "POST",
        path,
        body=body,
        headers=[
            (b"host", b"localhost"),
            (b"authorization", authorization),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ],
    )
    token_times: list[float] = []
    chunks: list[bytes] = []
    started = time.perf_counter()
    await communicator.send_input({"type": "http.request", "body": body})
    start = await communicator.receive_output(TIMEOUT)
    assert start["type"] == "http.response.start", start
    while True:
        message = await communicator.receive_output(TIMEOUT)
        now = time.perf_counter()
        assert message["type"] == "http.response.body", message
        chunks.append(message.get("body", b""))
        if carries_text is not None and carries_text(chunks[-1]):
            token_times.append(now)
        if not message.get("more_body", False):
            break
    seconds = now - started
    # The client hangs up, as api_turn's does, so the handler's disconnect listener ends too.
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=TIMEOUT)
    names = {key.decode().lower(): value.decode() for key, value in start.get("headers", [])}
    return HttpAnswer(Timed(seconds, token_times), start["status"], names, b"".join(chunks))
