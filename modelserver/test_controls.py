"""What the tests' Ollama stand-in does besides being Ollama: the ways it misbehaves on a test's
request (``/_test/...``, with ``test_controls`` only, answered by ``Controls``), what it saw, and real
Ollama's silent cut of a prompt longer than its context."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from modelserver.engine import Engine, Message, Result


@dataclass
class Behaviour:
    """How the server misbehaves on a test's request (``test_controls`` only)."""

    # Break the stream off after this many chunks, with no final chunk.
    drop_after_chunks: int | None = None
    # A pause before answering any request.
    delay_seconds: float = 0.0
    # A pause before each streamed chunk: a slow model.
    chunk_delay_seconds: float = 0.0
    fail_status: int | None = None
    # Every generation answers with this text instead of the model's (cut at ``num_predict`` tokens, as the model's).
    canned_reply: str | None = None
    # Generations answer with these texts in turn, the last one from then on (before ``canned_reply``).
    canned_replies: list[str] | None = None
    # Generations wait until ``/_test/release`` (at most ``hold_seconds``) before they start.
    hold: bool = False
    hold_seconds: float = 120.0
    # Real Ollama's overflow instead of a 413: a prompt that does not fit its context loses its
    # front, silently, and the reply reports the tokens it evaluated (``ollama_front_cut``).
    ollama_overflow: bool = False
    # The context the server allocates, whatever ``num_ctx`` asks (Ollama short of memory).
    allocated_ctx: int | None = None
    # The parameter size (Ollama's ``details.parameter_size``, "13B") that /api/show and /api/tags
    # report for a model name, as an Ollama serving models of several sizes would; others: the model's own.
    parameter_sizes: dict[str, str] = field(default_factory=dict)
    # The model names whose /api/show reports the "tools" capability, as Ollama does for a model whose
    # template takes tools; others report "completion" only (as the bundled model does).
    tool_capable_models: list[str] = field(default_factory=list)


# A canned reply made only of these, to a request with ``tools``, is answered as Ollama answers a model's
# tool calls: in ``message.tool_calls``, with empty content.
TOOL_CALL = re.compile(r"\s*<tool_call>(.*?)</tool_call>\s*", re.S)


def canned_tool_calls(text: str, tools: Any) -> list[dict[str, Any]] | None:
    """The tool calls a canned reply stands for (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
    one or more) in Ollama's shape, ``{function: {name, arguments}}``; None for a reply that is text, or
    when the request offered no tools (then the model's text is what it is)."""
    if not tools or not text.strip():
        return None
    calls, at = [], 0
    for match in TOOL_CALL.finditer(text):
        if match.start() != at:
            return None
        at = match.end()
        try:
            call = json.loads(match.group(1))
        except ValueError:
            return None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        calls.append({"function": {"name": call["name"], "arguments": call.get("arguments") or {}}})
    return calls if at == len(text) else None


def tool_calls_text(calls: Any) -> str:
    """An assistant message's tool calls as the model reads them back, in the form it writes them."""
    texts = []
    for call in calls or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        payload = {"name": function.get("name"), "arguments": function.get("arguments")}
        texts.append(f"<tool_call>{json.dumps(payload)}</tool_call>")
    return "".join(texts)


@dataclass
class Record:
    """What the test controls saw: requests as received, and each finished generation."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    served: list[dict[str, Any]] = field(default_factory=list)
    waiting: int = 0


class Controls:
    """The test controls' state: how the server misbehaves (``behaviour``), what it saw (``record``), and the
    generations held until a test releases them."""

    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.record = Record()
        self._released = threading.Event()
        self._canned_lock = threading.Lock()
        # Generations under way, kept across resets: a test's leftover may still run in the next one.
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()

    def reset(self) -> None:
        self._released.set()  # whatever a previous test held goes on
        self.behaviour = Behaviour()
        self.record = Record()
        self._released = threading.Event()

    def next_canned(self) -> str | None:
        """The fixed text the next generation answers with, if a test set one."""
        with self._canned_lock:
            replies = self.behaviour.canned_replies
            if replies:
                return replies.pop(0) if len(replies) > 1 else replies[0]
            return self.behaviour.canned_reply

    @property
    def in_flight(self) -> int:
        """How many generations are under way (held ones not counted)."""
        return self._in_flight

    @contextmanager
    def generating(self) -> Iterator[None]:
        """Counts a generation as under way while it runs."""
        with self._in_flight_lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._in_flight_lock:
                self._in_flight -= 1

    def wait_if_held(self) -> None:
        """A generation waits here while ``behaviour.hold`` says so, until released (or ``hold_seconds``)."""
        if self.behaviour.hold:
            self.record.waiting += 1
            self._released.wait(self.behaviour.hold_seconds)
            self.record.waiting -= 1

    def control(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A test's ``POST /_test/...`` request done: the status and JSON body of the answer."""
        if path == "/_test/behaviour":
            known = {f.name for f in fields(Behaviour)}
            unknown = set(body) - known
            if unknown:
                return 400, {"error": f"unknown behaviour: {', '.join(sorted(unknown))}"}
            for name, value in body.items():
                setattr(self.behaviour, name, value)
            if body.get("hold"):
                self._released = threading.Event()  # a new hold, even after a release
        elif path == "/_test/release":
            self._released.set()
        elif path == "/_test/reset":
            self.reset()
        elif path == "/_test/clear":
            self.record.requests.clear()
            self.record.served.clear()
        else:
            return 404, {"error": "not found"}
        return 200, {"ok": True}


def ollama_front_cut(messages: list[Message], num_ctx: int, count: Callable[[list[Message]], int]) -> list[Message]:
    """What real Ollama evaluates of a prompt that does not fit ``num_ctx``: the front is dropped
    (the system prompt first) until the rest takes at most half the context, as reported of it
    (``prompt_eval_count`` about ``num_ctx / 2``; ollama/ollama #3839, #8099). Whole messages go
    first; a last one still too long loses the front of its text."""
    if count(messages) < num_ctx:
        return messages
    keep = num_ctx // 2
    kept = list(messages)
    while len(kept) > 1 and count(kept[1:]) >= keep:
        kept.pop(0)
    # The first message left straddles the cut: the least of its front that must go.
    first, rest = kept[0], kept[1:]
    low, high = 0, len(first.content)
    while low < high:
        middle = (low + high) // 2
        if count([Message(first.role, first.content[middle:]), *rest]) <= keep:
            high = middle
        else:
            low = middle + 1
    return [Message(first.role, first.content[low:]), *rest]


def canned_reply(engine: Engine, text: str, messages: list[Message], max_tokens: int) -> Iterator[str | Result]:
    """A fixed reply as the model would send it: cut after ``max_tokens`` (``num_predict``;
    negative: no cap) of the model's own tokens, then ended with "length", and with the exact
    token counts of the prompt and of what was sent."""
    sent, completion_tokens = engine.cut_text(text, max_tokens)
    words = sent.split(" ")
    yield from (word + (" " if index < len(words) - 1 else "") for index, word in enumerate(words) if word or index)
    done_reason = "length" if sent != text else "stop"
    yield Result(prompt_tokens=engine.count_prompt(messages), completion_tokens=completion_tokens,
                 done_reason=done_reason, prompt_seconds=0.0, generation_seconds=0.0)  # fmt: skip
