"""Ollama's HTTP API in front of the engine.

``/api/chat`` and ``/api/generate`` (NDJSON streaming or one JSON object),
``/api/tags``, ``/api/show``, ``/api/ps`` and ``/api/version``, shaped as
Ollama's, so the official ``ollama`` client talks to it as to Ollama. Three
additions, which Ollama ignores or lacks:

- the ``X-Ollm-Priority: background`` header marks a summary or an aging call,
  which gives way to chat turns;
- ``POST /api/tokenize`` (``{"model", "messages"}``, ``{"model", "text"}``, or
  ``{"model", "texts"}`` for many texts in one call, answered with ``counts``)
  counts tokens exactly as generation will;
- ``POST /api/vocabulary`` (``{"model"}``) answers the model's tokenizer (``model``, ``pre``,
  ``merges``), with which the app counts plain text itself.

Of a request's ``options`` it honours ``num_ctx``, ``num_predict``, ``stop`` and
the sampling options ``temperature``, ``top_k``, ``top_p``, ``repeat_penalty``,
``repeat_last_n`` and ``seed``, with Ollama's defaults for those left out: a request without a seed
gets a fresh one, unless the server was started with ``--seed`` (the tests and benchmarks, for
repeatable replies).

With ``test_controls`` it also takes ``/_test/...`` requests that make it
misbehave as an Ollama server can (drop a stream, answer slowly, fail, hold a
generation until released, answer with a fixed text, or with tool calls, and
report the "tools" capability for the models they name): the tests' stand-in for
Ollama is this server, not a second implementation. A request's ``tools`` are
accepted; an assistant message's ``tool_calls`` are read back to the model as
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from modelserver.engine import (
    PARAMETER_SIZE,
    QUANTIZATION,
    ContextOverflow,
    Engine,
    EngineError,
    Message,
    Priority,
    Result,
)
from modelserver.test_controls import (
    Behaviour,
    Controls,
    canned_reply,
    canned_tool_calls,
    ollama_front_cut,
    tool_calls_text,
)

VERSION = "0.6.0-ollm-site"
# A streamed reply sends what was generated at most this often (its first token at once).
STREAM_FLUSH_SECONDS = float(os.environ.get("OLLM_STREAM_FLUSH_SECONDS", "0.05"))
PRIORITY_HEADER = "X-Ollm-Priority"


# Ollama's context when a request sends no ``num_ctx``.
OLLAMA_DEFAULT_NUM_CTX = 2048
# The sampling options honoured, as ``Engine.generate`` takes them; the others (mirostat, min_p…) are ignored.
SAMPLING_OPTIONS: dict[str, Callable[[Any], Any]] = {
    "temperature": float,
    "top_k": int,
    "top_p": float,
    "repeat_penalty": float,
    "repeat_last_n": int,
    "seed": int,
}


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _HTTPServer(ThreadingHTTPServer):
    # Dozens of clients connect at once under load: the default backlog of 5 is too short.
    request_queue_size = 128
    daemon_threads = True


class ModelServer:
    def __init__(
        self, engine: Engine, *, host: str, port: int, names: tuple[str, ...], test_controls: bool = False
    ) -> None:
        self.engine = engine
        self.names = names
        self.test_controls = test_controls
        self.controls = Controls()
        self._httpd = _HTTPServer((host, port), self._handler())

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def shutdown(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _details(self, name: str) -> dict[str, Any]:
        sizes = self.controls.behaviour.parameter_sizes if self.test_controls else {}
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.engine.family,
            "families": [self.engine.family],
            "parameter_size": sizes.get(name, PARAMETER_SIZE),
            "quantization_level": QUANTIZATION,
        }

    def capabilities(self, name: str) -> list[str]:
        """What /api/show says the model does: completion; tools too for a model the tests made tool-capable."""
        tools = self.test_controls and name in self.controls.behaviour.tool_capable_models
        return ["completion", "tools"] if tools else ["completion"]

    def _model_entry(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "model": name,
            "modified_at": _now(),
            "size": 98_362_432,
            "digest": "0" * 64,
            "details": self._details(name),
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # A response's headers and body are separate small writes: with Nagle's algorithm the
            # body waits for the client's delayed acknowledgement of the headers.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # one line per generation is enough
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

            def _body(self) -> dict[str, Any] | None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError as exc:
                    self._json(400, {"error": f"the body is not JSON: {exc}"})
                    return None
                if not isinstance(body, dict):
                    self._json(400, {"error": "the body must be a JSON object"})
                    return None
                if server.test_controls and not self.path.startswith("/_test/"):
                    server.controls.record.requests.append({"path": self.path, **body})
                return body

            def _misbehave(self) -> bool:
                if not server.test_controls:
                    return False
                if server.controls.behaviour.delay_seconds:
                    time.sleep(server.controls.behaviour.delay_seconds)
                if server.controls.behaviour.fail_status is not None:
                    self._json(server.controls.behaviour.fail_status, {"error": "the test server was told to fail"})
                    return True
                return False

            def _known(self, name: Any) -> bool:
                if name in server.names:
                    return True
                self._json(404, {"error": f"model '{name}' not found, try pulling it first"})
                return False

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                if self.path == "/":
                    data = b"Ollama is running"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif self.path == "/api/version":
                    self._json(200, {"version": VERSION, "pid": os.getpid()})
                elif self.path == "/api/tags":
                    if not self._misbehave():
                        self._json(200, {"models": [server._model_entry(name) for name in server.names]})
                elif self.path == "/api/ps":
                    self._json(200, {"models": [
                        {**server._model_entry(name), "expires_at": "2318-01-01T00:00:00Z", "size_vram": 0}
                        for name in server.names
                    ]})  # fmt: skip
                elif self.path == "/_test/record" and server.test_controls:
                    self._json(200, {**asdict(server.controls.record), "in_flight": server.controls.in_flight})
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = self._body()
                if body is None:
                    return
                if self.path.startswith("/_test/") and server.test_controls:
                    self._json(*server.controls.control(self.path, body))
                    return
                if self._misbehave():
                    return
                if self.path == "/api/show":
                    if self._known(body.get("model")):
                        self._json(200, {
                            "modelfile": "",
                            "parameters": "",
                            "template": "",
                            "details": server._details(body["model"]),
                            "model_info": {
                                "general.architecture": server.engine.family,
                                f"{server.engine.family}.context_length": server.engine.context_length,
                            },
                            "capabilities": server.capabilities(body["model"]),
                        })  # fmt: skip
                elif self.path == "/api/tokenize":
                    self._tokenize(body)
                elif self.path == "/api/vocabulary":
                    if self._known(body.get("model")):
                        self._json(200, {"model": body["model"], **server.engine.vocabulary})
                elif self.path in ("/api/chat", "/api/generate"):
                    self._generate(body, chat=self.path == "/api/chat")
                else:
                    self._json(404, {"error": "not found"})

            def _tokenize(self, body: dict[str, Any]) -> None:
                if not self._known(body.get("model")):
                    return
                answer: dict[str, Any] = {"model": body["model"], "message_overhead": server.engine.message_overhead}
                try:
                    if "messages" in body:
                        answer["count"] = server.engine.count_prompt([_message(m) for m in body["messages"]])
                    elif "texts" in body:
                        # An import counts thousands of messages: one request, not one each.
                        if not isinstance(body["texts"], list):
                            self._json(400, {"error": "texts must be a list of texts"})
                            return
                        answer["counts"] = [server.engine.count_text(str(text)) for text in body["texts"]]
                    else:
                        answer["count"] = server.engine.count_text(str(body.get("text", "")))
                except (KeyError, TypeError, AttributeError) as exc:
                    self._json(400, {"error": f"messages must be objects with a role and a content: {exc}"})
                    return
                self._json(200, answer)

            def _generate(self, body: dict[str, Any], *, chat: bool) -> None:
                received = time.perf_counter()
                if not self._known(body.get("model")):
                    return
                options = body.get("options") or {}
                try:
                    if chat:
                        messages = [_message(m) for m in body.get("messages", [])]
                    else:
                        messages = [Message("system", body["system"])] if body.get("system") else []
                        messages.append(Message("user", str(body.get("prompt", ""))))
                    priority: Priority = (
                        "background" if self.headers.get(PRIORITY_HEADER, "").lower() == "background" else "interactive"
                    )
                    num_ctx = int(options.get("num_ctx", OLLAMA_DEFAULT_NUM_CTX))
                    max_tokens = int(options.get("num_predict", -1))
                    stop = [str(s) for s in options.get("stop") or ()]
                    # What the request leaves out (or sends as null) is the engine's default: Ollama's.
                    sampling = {name: kind(options[name]) for name, kind in SAMPLING_OPTIONS.items()
                                if options.get(name) is not None}  # fmt: skip
                except (KeyError, TypeError, AttributeError, ValueError) as exc:
                    self._json(400, {"error": f"the request is malformed: {exc}"})
                    return
                stream = bool(body.get("stream", True))
                if server.test_controls:
                    server.controls.wait_if_held()
                in_flight = server.controls.generating() if server.test_controls else contextlib.nullcontext()
                with in_flight:
                    if server.test_controls and server.controls.behaviour.ollama_overflow:
                        num_ctx = min(num_ctx, server.controls.behaviour.allocated_ctx or num_ctx)
                        messages = ollama_front_cut(messages, num_ctx, server.engine.count_prompt)
                    cancel = threading.Event()
                    canned = server.controls.next_canned() if server.test_controls else None
                    if canned is not None:
                        calls = canned_tool_calls(canned, body.get("tools")) if chat else None
                        self._send(
                            canned_reply(server.engine, "" if calls else canned, messages, max_tokens),
                            cancel,
                            body["model"],
                            chat=chat,
                            stream=stream,
                            tool_calls=calls,
                        )
                        return
                    parts = server.engine.generate(
                        messages,
                        num_ctx=num_ctx,
                        max_tokens=max_tokens,
                        stop=stop,
                        priority=priority,
                        cancel=cancel,
                        **sampling,
                    )
                    try:
                        first = next(parts)
                    except ContextOverflow as exc:
                        self._json(413, {"error": str(exc)})
                        return
                    except EngineError as exc:
                        self._json(500, {"error": str(exc)})
                        return

                    def tracked() -> Iterator[str | Result]:
                        for part in itertools.chain([first], parts):
                            if isinstance(part, Result) and server.test_controls:
                                # Recorded before the final chunk goes out, so a client that has read the whole
                                # reply always finds it in the record.
                                server.controls.record.served.append({
                                    "last_message": messages[-1].content if messages else "",
                                    "priority": priority,
                                    "done_reason": part.done_reason,
                                    "prompt_tokens": part.prompt_tokens,
                                    "completion_tokens": part.completion_tokens,
                                    "server_seconds": time.perf_counter() - received,
                                    "model_seconds": part.prompt_seconds + part.generation_seconds,
                                })  # fmt: skip
                            yield part

                    try:
                        self._send(tracked(), cancel, body["model"], chat=chat, stream=stream)
                    finally:
                        parts.close()  # lets go of the context however the reply ended

            def _client_closed(self) -> bool:
                """Whether the client has hung up: its socket reads as ended (a client sends nothing more
                while it reads a reply)."""
                readable, _, _ = select.select([self.connection], [], [], 0)
                if not readable:
                    return False
                try:
                    peeked: bytes = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                    return peeked == b""
                except BlockingIOError:
                    return False
                except OSError:
                    return True

            def _send(
                self,
                parts: Iterator[str | Result],
                cancel: threading.Event,
                model: str,
                *,
                chat: bool,
                stream: bool,
                tool_calls: list[dict[str, Any]] | None = None,
            ) -> None:
                """Send the reply as Ollama does; a client that goes away cancels the generation. ``tool_calls``:
                the reply's, in its message (streamed: in a chunk of their own before the last, as Ollama does)."""

                def line(text: str, result: Result | None = None) -> dict[str, Any]:
                    out: dict[str, Any] = {"model": model, "created_at": _now(), "done": result is not None}
                    if chat:
                        out["message"] = {"role": "assistant", "content": text}
                    else:
                        out["response"] = text
                    if result is not None:
                        out.update(
                            {
                                "done_reason": "length" if result.done_reason == "length" else "stop",
                                "total_duration": int((result.prompt_seconds + result.generation_seconds) * 1e9),
                                "load_duration": 0,
                                "prompt_eval_count": result.prompt_tokens,
                                "prompt_eval_duration": int(result.prompt_seconds * 1e9),
                                "eval_count": result.completion_tokens,
                                "eval_duration": int(result.generation_seconds * 1e9),
                            }
                        )
                    return out

                behaviour = server.controls.behaviour if server.test_controls else Behaviour()
                if not stream:
                    texts: list[str] = []
                    for part in parts:
                        if isinstance(part, Result):
                            answer = line("".join(texts), part)
                            if tool_calls:
                                answer["message"]["tool_calls"] = tool_calls
                            self._json(200, answer)
                        else:
                            texts.append(part)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent = 0
                pending: list[str] = []
                flushed_at = float("-inf")

                def write(payload: dict[str, Any]) -> None:
                    nonlocal sent
                    data = json.dumps(payload).encode() + b"\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                    sent += 1

                try:
                    for part in parts:
                        if behaviour.drop_after_chunks is not None and sent >= behaviour.drop_after_chunks:
                            cancel.set()
                            self.close_connection = True
                            self.connection.shutdown(2)  # mid-stream, with no final chunk
                            return
                        if behaviour.chunk_delay_seconds:
                            time.sleep(behaviour.chunk_delay_seconds)
                        if isinstance(part, Result):
                            if pending:
                                write(line("".join(pending)))
                            if tool_calls:
                                calls = line("")
                                calls["message"]["tool_calls"] = tool_calls
                                write(calls)
                            write(line("", part))
                            break
                        pending.append(part)
                        # The first token goes out at once; after it, the tokens of STREAM_FLUSH_SECONDS share a
                        # line: a line a token cost the decoding threads CPU, on a machine they fill.
                        if time.perf_counter() - flushed_at >= STREAM_FLUSH_SECONDS:
                            write(line("".join(pending)))
                            pending.clear()
                            flushed_at = time.perf_counter()
                        elif self._client_closed():
                            # Withheld tokens write nothing, so no write can fail: look at the socket instead.
                            raise ConnectionResetError
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    cancel.set()  # the client went away: stop generating, as Ollama does
                    for _ in parts:
                        pass

        return Handler


def _message(raw: dict[str, Any]) -> Message:
    """A request's message as the model reads it: an assistant's tool calls in the form it writes them."""
    return Message(str(raw["role"]), str(raw.get("content") or "") + tool_calls_text(raw.get("tool_calls")))
