"""A wire-compatible stand-in for an Ollama server, answering with the real embedded model.

Ollama cannot run here, so the tests put this server at the boundary: the
official client, httpx and the gateway's error mapping all run for real
against it. It speaks ``/api/chat`` and ``/api/generate`` (NDJSON streaming or
one JSON object), ``/api/tags``, ``/api/show`` and ``/api/version``, answers
404 for unknown models, and can misbehave on request: drop a stream half-way,
answer slowly, or fail with a status code.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contextmgr.llm.embedded import MODEL_NAME, EmbeddedBackend
from contextmgr.llm.types import ChatMessage, ChatResult, LLMError

SERVED_MODEL = "smollm2:135m"
DETAILS = {
    "parent_model": "",
    "format": "gguf",
    "family": "llama",
    "families": ["llama"],
    "parameter_size": "135M",
    "quantization_level": "Q4_1",
}


@dataclass
class Behaviour:
    drop_after_chunks: int | None = None
    delay_seconds: float = 0.0
    # A pause before each streamed chunk: a slow model, so a test can act while a reply streams.
    chunk_delay_seconds: float = 0.0
    fail_status: int | None = None
    # When set, every generation answers with this text instead of the model's.
    canned_reply: str | None = None
    # When set, a generation waits (at most HOLD_SECONDS) until the event is set before answering.
    hold: threading.Event | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    # One entry per finished generation: the request's last message, the seconds the request spent
    # in this server (waiting for the model included) and the model's own prompt + generation seconds.
    served: list[Served] = field(default_factory=list)


@dataclass(frozen=True)
class Served:
    last_message: str
    server_seconds: float
    model_seconds: float


HOLD_SECONDS = 60.0


def _canned(text: str) -> Iterator[str | ChatResult]:
    words = text.split(" ")
    yield from (word + (" " if index < len(words) - 1 else "") for index, word in enumerate(words) if word or index)
    yield ChatResult(
        prompt_tokens=1,
        completion_tokens=len(words),
        done_reason="stop",
        prompt_seconds=0.0,
        generation_seconds=0.0,
        backend="ollama",
        model=SERVED_MODEL,
    )


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _Server(ThreadingHTTPServer):
    # Dozens of clients connect at once in the load test: the default backlog of 5 is too short.
    request_queue_size = 128


class FakeOllama:
    def __init__(self, backend: EmbeddedBackend) -> None:
        self.backend = backend
        self.behaviour = Behaviour()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeOllama:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        self.behaviour = Behaviour()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

            def handle(self) -> None:
                # A client closing its keep-alive connection is not an error.
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                    super().handle()

            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length") or 0)
                body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
                fake.behaviour.requests.append({"path": self.path, **body})
                return body

            def _misbehave(self) -> bool:
                if fake.behaviour.delay_seconds:
                    time.sleep(fake.behaviour.delay_seconds)
                if fake.behaviour.fail_status is not None:
                    self._json(fake.behaviour.fail_status, {"error": "the fake server was told to fail"})
                    return True
                return False

            def do_GET(self) -> None:
                if self.path == "/api/version":
                    self._json(200, {"version": "0.12.0-fake"})
                elif self.path == "/api/tags":
                    if self._misbehave():
                        return
                    self._json(
                        200,
                        {
                            "models": [
                                {
                                    "name": SERVED_MODEL,
                                    "model": SERVED_MODEL,
                                    "modified_at": _now(),
                                    "size": 98_362_432,
                                    "digest": "0" * 64,
                                    "details": DETAILS,
                                }
                            ]
                        },
                    )
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = self._body()
                if self._misbehave():
                    return
                if self.path == "/api/show":
                    if body.get("model") != SERVED_MODEL:
                        self._json(404, {"error": f"model '{body.get('model')}' not found"})
                        return
                    self._json(
                        200,
                        {
                            "modelfile": "",
                            "parameters": "",
                            "template": "",
                            "details": DETAILS,
                            "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
                            "capabilities": ["completion"],
                        },
                    )
                elif self.path in ("/api/chat", "/api/generate"):
                    self._generate(body, chat=self.path == "/api/chat")
                else:
                    self._json(404, {"error": "not found"})

            def _generate(self, body: dict[str, Any], *, chat: bool) -> None:
                received = time.perf_counter()
                if body.get("model") != SERVED_MODEL:
                    self._json(404, {"error": f"model '{body.get('model')}' not found, try pulling it first"})
                    return
                options = body.get("options") or {}
                if chat:
                    messages = [ChatMessage(m["role"], m.get("content", "")) for m in body.get("messages", [])]
                else:
                    messages = [ChatMessage("user", body.get("prompt", ""))]
                if fake.behaviour.hold is not None:
                    fake.behaviour.hold.wait(HOLD_SECONDS)
                cancel = threading.Event()
                if fake.behaviour.canned_reply is not None:
                    self._send(_canned(fake.behaviour.canned_reply), cancel, chat=chat, stream=body.get("stream", True))
                    return
                parts = fake.backend.generate(
                    messages,
                    model=MODEL_NAME,
                    num_ctx=int(options.get("num_ctx", 2048)),
                    max_tokens=int(options.get("num_predict", 128)),
                    temperature=float(options.get("temperature", 0.8)),
                    stop=options.get("stop") or (),
                    seed=options.get("seed"),
                    cancel=cancel,
                )
                try:
                    first = next(parts)
                except LLMError as exc:
                    self._json(500, {"error": str(exc)})
                    return
                try:
                    result = self._send(
                        itertools.chain([first], parts), cancel, chat=chat, stream=body.get("stream", True)
                    )
                finally:
                    parts.close()  # releases the model's lock however the reply ended
                if result is not None:
                    fake.behaviour.served.append(
                        Served(
                            last_message=messages[-1].content if messages else "",
                            server_seconds=time.perf_counter() - received,
                            model_seconds=result.prompt_seconds + result.generation_seconds,
                        )
                    )

            def _send(
                self, parts: Iterator[str | ChatResult], cancel: threading.Event, *, chat: bool, stream: bool
            ) -> ChatResult | None:
                """Send the reply; its final counts once it was sent whole, else None."""

                def line(text: str, done: bool, result: ChatResult | None = None) -> dict[str, Any]:
                    out: dict[str, Any] = {"model": SERVED_MODEL, "created_at": _now(), "done": done}
                    if chat:
                        out["message"] = {"role": "assistant", "content": text}
                    else:
                        out["response"] = text
                    if result is not None:
                        out.update(
                            {
                                "done_reason": result.done_reason,
                                "prompt_eval_count": result.prompt_tokens,
                                "eval_count": result.completion_tokens,
                                "prompt_eval_duration": int(result.prompt_seconds * 1e9),
                                "eval_duration": int(result.generation_seconds * 1e9),
                                "total_duration": int((result.prompt_seconds + result.generation_seconds) * 1e9),
                            }
                        )
                    return out

                if not stream:
                    texts: list[str] = []
                    for part in parts:
                        if isinstance(part, ChatResult):
                            self._json(200, line("".join(texts), True, part))
                            return part
                        texts.append(part)
                    return None
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent = 0
                final: ChatResult | None = None
                try:
                    for part in parts:
                        if fake.behaviour.drop_after_chunks is not None and sent >= fake.behaviour.drop_after_chunks:
                            cancel.set()
                            self.close_connection = True
                            self.connection.shutdown(2)  # mid-stream, with no final chunk
                            return None
                        if fake.behaviour.chunk_delay_seconds:
                            time.sleep(fake.behaviour.chunk_delay_seconds)
                        if isinstance(part, ChatResult):
                            final = part
                        payload = line("", True, part) if isinstance(part, ChatResult) else line(part, False)
                        data = json.dumps(payload).encode() + b"\n"
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                        sent += 1
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    cancel.set()  # the client went away: stop generating, as Ollama does
                    for _ in parts:
                        pass
                    return None
                return final

        return Handler
