"""The one door to the LLM: routes each call to the backend that has the model.

``OLLM_LLM_BACKEND`` is ``auto`` (Ollama when it answers, else the embedded
model), ``ollama`` or ``embedded``. The choice and its reason are kept for the
UI and logs. Token estimates for Ollama models are calibrated from the exact
``prompt_eval_count`` each reply reports, unless that count falls well below what
was sent: then Ollama cut the prompt, and the result says so (``sent_prompt_tokens``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

from django.conf import settings

from contextmgr.core.tokens import TokenCalibration, TokenCount, TokenCounter, prompt_truncated
from contextmgr.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from contextmgr.llm.embedded import EmbeddedBackend
from contextmgr.llm.ollama_backend import OllamaBackend
from contextmgr.llm.types import (
    BackendUnavailable,
    ChatMessage,
    ChatResult,
    ChatStream,
    Completion,
    LLMBackend,
    LLMError,
    ModelInfo,
    ModelNotFound,
)
from contextmgr.resources import TiktokenCounter, count_text_tokens

logger = logging.getLogger(__name__)
# Ollama counts only after a call; estimates get this much headroom before one.
OLLAMA_ESTIMATE_MARGIN = 0.05


class CalibratedCounter:
    def __init__(self, calibration: TokenCalibration, model: str) -> None:
        self._calibration = calibration
        self._model = model

    def count(self, text: str) -> TokenCount:
        return TokenCount(self._calibration.estimate(self._model, TiktokenCounter().count(text).tokens), exact=False)

    def count_all(self, texts: Sequence[str]) -> list[TokenCount]:
        return [self.count(text) for text in texts]


class ExactCounter:
    """The embedded model's own tokenizer plus its chat template's per-message cost.

    While the model server cannot answer (it restarts by itself), a message is counted by
    the estimate, marked inexact, rather than not stored.
    """

    def __init__(self, backend: EmbeddedBackend, fallback: CalibratedCounter) -> None:
        self._backend = backend
        self._fallback = fallback

    def count(self, text: str) -> TokenCount:
        return self.count_all([text])[0]

    def count_all(self, texts: Sequence[str]) -> list[TokenCount]:
        try:
            counts = self._backend.count_texts_tokens(texts)
            overhead = self._backend.message_overhead()
        except LLMError:
            logger.warning("the model server did not count %d message(s); using the estimate", len(texts))
            return self._fallback.count_all(texts)
        return [TokenCount(count + overhead, exact=True) for count in counts]


def _is_embedded(model: str) -> bool:
    return model == EMBEDDED_MODEL or model.startswith("embedded/")


Mode = Literal["auto", "ollama", "embedded"]
MODES: tuple[Mode, ...] = ("auto", "ollama", "embedded")


@dataclass(frozen=True)
class BackendStatus:
    mode: Mode
    backend: str  # "ollama", "embedded" or "none"
    reason: str
    default_model: str | None


class Gateway:
    def __init__(self, *, mode: str, embedded: EmbeddedBackend | None, ollama: OllamaBackend | None) -> None:
        if mode not in MODES:
            raise ValueError(f"OLLM_LLM_BACKEND must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.embedded = embedded if mode != "ollama" else None
        self.ollama = ollama if mode != "embedded" else None
        self.calibration = TokenCalibration()
        self._status: BackendStatus | None = None

    async def status(self, *, refresh: bool = False) -> BackendStatus:
        """Which backend serves by default, and why; probed once unless ``refresh``."""
        if self._status is None or refresh:
            self._status = await self._probe()
            logger.info("LLM backend: %s (%s)", self._status.backend, self._status.reason)
        return self._status

    async def _probe(self) -> BackendStatus:
        if self.ollama is not None:
            if await self.ollama.health():
                models = await self.ollama.list_models()
                default = models[0].name if models else None
                if default is not None or self.embedded is None:
                    return BackendStatus(self.mode, "ollama", f"Ollama answers at {self.ollama.host}", default)
                reason = f"Ollama at {self.ollama.host} has no models pulled; using the embedded model"
            else:
                reason = f"Ollama is not reachable at {self.ollama.host}"
                if self.embedded is None:
                    return BackendStatus(self.mode, "none", reason, None)
                reason += "; using the embedded model"
        else:
            reason = "OLLM_LLM_BACKEND=embedded"
        assert self.embedded is not None
        if not await self.embedded.health():
            return BackendStatus(self.mode, "none", self.embedded.unreachable(), None)
        return BackendStatus(self.mode, "embedded", reason, EMBEDDED_MODEL)

    def backend_for(self, model: str) -> LLMBackend:
        if _is_embedded(model):
            if self.embedded is None:
                raise ModelNotFound(
                    f"model {model} needs the embedded backend, which OLLM_LLM_BACKEND=ollama turns off"
                )
            return self.embedded
        if self.ollama is None:
            raise ModelNotFound(f"model {model} needs Ollama, which OLLM_LLM_BACKEND=embedded turns off")
        return self.ollama

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
        background: bool = False,
        repeat_penalty: float | None = None,
    ) -> ChatStream:
        """A reply; ``background`` marks summaries and aging calls, which the bundled model serves after turns.
        ``repeat_penalty`` (Ollama's option; None: the backend's default) curbs a model that loops."""
        backend = self.backend_for(model)
        stream = backend.chat(
            messages,
            model=model,
            num_ctx=num_ctx,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            seed=seed,
            background=background,
            repeat_penalty=repeat_penalty,
        )
        if backend is self.ollama:
            return ChatStream(self._calibrating(stream, messages, model))
        return stream

    async def _calibrating(
        self, stream: ChatStream, messages: Sequence[ChatMessage], model: str
    ) -> AsyncGenerator[str | ChatResult, None]:
        try:
            async for delta in stream:
                yield delta
        finally:
            await stream.aclose()
        result: ChatResult | None = stream.result
        if result is not None:
            estimate = sum(TiktokenCounter().count(m.content).tokens for m in messages)
            sent = self.calibration.estimate(model, estimate)
            if prompt_truncated(sent=sent, reported=result.prompt_tokens):
                # Ollama dropped the front of the prompt: its count is of what was left, no
                # measure of this model's tokens, so it must not teach the calibration.
                logger.warning(
                    "%s evaluated %d prompt tokens of about %d sent: the server cut the prompt",
                    model,
                    result.prompt_tokens,
                    sent,
                )
                result = dataclasses.replace(result, sent_prompt_tokens=sent)
            else:
                self.calibration.observe(model, exact=result.prompt_tokens, estimated=estimate)
            yield result

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str,
        num_ctx: int,
        max_tokens: int,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        seed: int | None = None,
        background: bool = False,
        repeat_penalty: float | None = None,
    ) -> Completion:
        stream = self.chat(
            messages,
            model=model,
            num_ctx=num_ctx,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            seed=seed,
            background=background,
            repeat_penalty=repeat_penalty,
        )
        return await stream.collect()

    async def list_models(self) -> list[ModelInfo]:
        """Every model of every enabled backend that answers (embedded first)."""
        models: list[ModelInfo] = []
        if self.embedded is not None and await self.embedded.health():
            models += await self.embedded.list_models()
        if self.ollama is not None:
            # An unreachable Ollama only means fewer models to offer.
            with contextlib.suppress(BackendUnavailable):
                # An "embedded/" name is always served by the embedded backend, whoever else lists it.
                models += [m for m in await self.ollama.list_models() if not _is_embedded(m.name)]
        return models

    async def unavailable_reason(self, model: str) -> tuple[str, bool]:
        """Why ``model`` is not served now, in words a user can act on, and whether it is only
        because its backend does not answer (it may come back by itself)."""
        try:
            backend = self.backend_for(model)
        except ModelNotFound as exc:
            return str(exc), False
        if isinstance(backend, EmbeddedBackend):
            if not await backend.health():
                return backend.unreachable(), True
            return f"the embedded backend has only {EMBEDDED_MODEL}", False
        assert self.ollama is not None
        if not await self.ollama.health():
            return f"Ollama is not reachable at {self.ollama.host}", True
        return f"Ollama at {self.ollama.host} does not have it (`ollama pull {model}` fetches it)", False

    async def model_info(self, model: str) -> ModelInfo:
        return await self.backend_for(model).model_info(model)

    async def count_tokens(self, text: str, model: str) -> int | None:
        """Exact where the backend can count; else None (callers then use the calibrated estimate)."""
        return await self.backend_for(model).count_tokens(text, model)

    def token_counter(self, model: str) -> TokenCounter:
        """Counts message texts for ``model``: exact on the embedded backend, else the calibrated estimate."""
        backend = self.backend_for(model)
        estimate = CalibratedCounter(self.calibration, model)
        if isinstance(backend, EmbeddedBackend):
            return ExactCounter(backend, estimate)
        return estimate

    def count_prompt(self, messages: Sequence[ChatMessage], model: str) -> TokenCount:
        """The tokens ``messages`` will take in ``model``'s context.

        Exact on the embedded backend; for Ollama (and while the bundled model
        server restarts) the calibrated estimate plus a safety margin.
        """
        backend = self.backend_for(model)
        if isinstance(backend, EmbeddedBackend):
            with contextlib.suppress(LLMError):
                return TokenCount(tokens=backend.count_prompt_tokens(messages), exact=True)
        estimate = sum(self.calibration.estimate(model, TiktokenCounter().count(m.content).tokens) for m in messages)
        return TokenCount(tokens=math.ceil(estimate * (1 + OLLAMA_ESTIMATE_MARGIN)), exact=False)

    def estimate_tokens(self, text: str, model: str) -> int:
        """tiktoken's count scaled by what this model's real counts have shown so far."""
        return self.calibration.estimate(model, count_text_tokens(text))

    async def health(self) -> bool:
        return (await self.status(refresh=True)).backend != "none"


__all__ = ["BackendStatus", "Gateway", "LLMError"]


@cache
def get_gateway() -> Gateway:
    """The process-wide gateway, configured from settings."""
    return Gateway(
        mode=settings.OLLM_LLM_BACKEND,
        embedded=EmbeddedBackend(host=settings.OLLM_MODEL_SERVER_URL, timeout=settings.OLLAMA_TIMEOUT),
        ollama=OllamaBackend(host=settings.OLLAMA_HOST, timeout=settings.OLLAMA_TIMEOUT),
    )
