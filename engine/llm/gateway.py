"""The one door to the LLM: routes each call to a host that has the model, through that host's queue.

``OLLM_LLM_BACKEND`` is ``auto`` (Ollama when it answers, else the embedded
model), ``ollama`` or ``embedded``; ``OLLAMA_HOSTS`` lists several Ollama servers, which share
the load and stand in for each other (``engine.llm.hosts``). The choice and its reason are kept for the
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
from typing import Literal

from engine.core.tokens import TokenCalibration, TokenCount, TokenCounter, prompt_truncated
from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from engine.llm.embedded import EmbeddedBackend
from engine.llm.hosts import Host, HostQueue, OnQueued
from engine.llm.ollama_backend import OllamaBackend
from engine.llm.types import (
    BackendUnavailable,
    ChatMessage,
    ChatRequest,
    ChatResult,
    ChatStream,
    Completion,
    ConnectionLost,
    HostAttempt,
    HostFailed,
    HostReport,
    LLMBackend,
    LLMError,
    LLMTimeout,
    ModelInfo,
    ModelNotFound,
    NoHostAnswered,
    ReplyCut,
)
from engine.resources import TiktokenCounter, count_text_tokens

logger = logging.getLogger(__name__)
# Ollama counts only after a call; estimates get this much headroom before one.
OLLAMA_ESTIMATE_MARGIN = 0.05
# Failures for want of the host: the next host that serves the model is asked, before the first token.
HOST_FAILURES = (BackendUnavailable, LLMTimeout, ConnectionLost, HostFailed)


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
    def __init__(
        self,
        *,
        mode: str,
        embedded: EmbeddedBackend | None,
        ollama: OllamaBackend | Sequence[OllamaBackend] | None,
        slots: int = 1,
        embedded_slots: int = 1,
        max_wait: float = 15.0,
        retry_after: float = 30.0,
    ) -> None:
        """``slots``: generations each Ollama host runs at once; ``embedded_slots``: those of the bundled
        model server (its turn slots)."""
        if mode not in MODES:
            raise ValueError(f"OLLM_LLM_BACKEND must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode

        def host(backend: OllamaBackend, slots: int = slots) -> Host:
            return Host(backend, HostQueue(slots=slots, max_wait=max_wait), retry_after=retry_after)

        self.embedded = embedded if mode != "ollama" else None
        self.embedded_host = host(self.embedded, embedded_slots) if self.embedded is not None else None
        listed = [] if ollama is None else [ollama] if isinstance(ollama, OllamaBackend) else list(ollama)
        self.ollama_hosts = [host(backend) for backend in listed] if mode != "embedded" else []
        self.calibration = TokenCalibration()
        self._status: BackendStatus | None = None

    @property
    def ollama(self) -> OllamaBackend | None:
        """The first Ollama host: the one named when the gateway says where Ollama is."""
        return self.ollama_hosts[0].backend if self.ollama_hosts else None

    @property
    def hosts(self) -> list[Host]:
        return ([self.embedded_host] if self.embedded_host is not None else []) + self.ollama_hosts

    async def status(self, *, refresh: bool = False) -> BackendStatus:
        """Which backend serves by default, and why; probed once unless ``refresh``."""
        if self._status is None or refresh:
            self._status = await self._probe()
            logger.info("LLM backend: %s (%s)", self._status.backend, self._status.reason)
        return self._status

    async def _ollama_answering(self) -> OllamaBackend | None:
        for host in self.ollama_hosts:
            if await host.backend.health():
                return host.backend
        return None

    async def _probe(self) -> BackendStatus:
        if self.ollama is not None:
            answering = await self._ollama_answering()
            if answering is not None:
                models = await answering.list_models()
                default = models[0].name if models else None
                if default is not None or self.embedded is None:
                    return BackendStatus(self.mode, "ollama", f"Ollama answers at {answering.shown_host}", default)
                reason = f"Ollama at {answering.shown_host} has no models pulled; using the embedded model"
            else:
                reason = f"Ollama is not reachable at {self._ollama_where()}"
                if self.embedded is None:
                    return BackendStatus(self.mode, "none", reason, None)
                reason += "; using the embedded model"
        else:
            reason = "OLLM_LLM_BACKEND=embedded"
        assert self.embedded is not None
        if not await self.embedded.health():
            return BackendStatus(self.mode, "none", self.embedded.unreachable(), None)
        return BackendStatus(self.mode, "embedded", reason, EMBEDDED_MODEL)

    def _ollama_where(self) -> str:
        return ", ".join(host.url for host in self.ollama_hosts)

    def _hosts_for(self, model: str) -> list[Host]:
        """The hosts that may serve ``model``, the likeliest first: up before down, those that
        listed it before those not asked yet, the least busy first."""
        if _is_embedded(model):
            if self.embedded_host is None:
                raise ModelNotFound(
                    f"model {model} needs the embedded backend, which OLLM_LLM_BACKEND=ollama turns off"
                )
            return [self.embedded_host]
        if not self.ollama_hosts:
            raise ModelNotFound(f"model {model} needs Ollama, which OLLM_LLM_BACKEND=embedded turns off")

        def likely(host: Host) -> tuple[bool, bool, int]:
            listed_elsewhere = host.models is not None and model not in host.models
            return host.is_down(), listed_elsewhere, host.queue.load

        return sorted(self.ollama_hosts, key=likely)

    def backend_for(self, model: str) -> LLMBackend:
        return self._hosts_for(model)[0].backend

    def send(self, request: ChatRequest, *, on_queued: OnQueued | None = None) -> ChatStream:
        """A reply, once its host has a slot for it (``on_queued`` hears when it must wait, and how
        many are ahead). A ``background`` request (summaries, aging and merges) waits for chat
        turns, at most ``OLLM_BACKGROUND_MAX_WAIT_SECONDS``.

        A host that does not answer or times out is marked down and the next one that may serve
        the model is asked: a turn only before its first token, background work (whose reply
        nobody sees until it ends) at any point.
        """
        return ChatStream(self._scheduled(request, self._hosts_for(request.model), on_queued))

    async def _scheduled(
        self, request: ChatRequest, hosts: list[Host], on_queued: OnQueued | None
    ) -> AsyncGenerator[str | ChatResult, None]:
        attempts: list[HostAttempt] = []
        for attempt, host in enumerate(hosts):
            last = attempt == len(hosts) - 1
            parts: list[str] = []
            async with host.queue.slot(background=request.background, on_queued=on_queued if not attempt else None):
                stream = self._send(host, request)
                try:
                    async for delta in stream:
                        if request.background:
                            parts.append(delta)  # yielded once whole: another host may have to start over
                        else:
                            yield delta
                            parts.append(delta)
                except HOST_FAILURES as exc:
                    host.request_failed(str(exc))
                    attempts.append(HostAttempt(host.url, str(exc)))
                    if parts and not request.background:
                        # The client has part of the reply: no other host can take it over unseen.
                        logger.warning(
                            "%s failed after part of a reply of %s had reached the client (%s); the reply ends cut",
                            host.url,
                            request.model,
                            exc,
                        )
                        raise ReplyCut(
                            f"the connection to {host.backend.label} broke off mid-reply; the part that came is "
                            "kept, marked as cut, and Retry asks again",
                            attempts,
                        ) from exc
                    if not last:
                        logger.warning("%s failed (%s); asking the next host", host.url, exc)
                        continue
                    if len(attempts) == 1:
                        raise
                    raise self._none_answered(request.model, attempts) from exc
                except ModelNotFound as exc:
                    if not last:
                        continue
                    if not attempts:
                        raise
                    # Hosts that may have it failed: the model may come back with them.
                    attempts.append(HostAttempt(host.url, str(exc)))
                    raise self._none_answered(request.model, attempts) from exc
                finally:
                    await stream.aclose()
            host.request_served()
            for part in parts if request.background else ():
                yield part
            if stream.result is not None:
                yield stream.result
            return

    def _none_answered(self, model: str, attempts: Sequence[HostAttempt]) -> NoHostAnswered:
        """Every host that may serve ``model`` failed: the operators' log names each and why; the
        error's message names none (staff read them in its ``operator_detail``)."""
        error = NoHostAnswered(
            f"model {model} is unavailable now: no host that serves it answered ({len(attempts)} tried, "
            "each is not reachable or failed); Retry asks again",
            attempts,
        )
        logger.warning("no host answered for %s: %s", model, error.operator_detail)
        return error

    def _send(self, host: Host, request: ChatRequest) -> ChatStream:
        stream = host.backend.chat(request)
        if host is self.embedded_host:
            return stream
        return ChatStream(self._calibrating(stream, request.messages, request.model))

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

    async def complete(self, request: ChatRequest, *, on_queued: OnQueued | None = None) -> Completion:
        """The whole reply to ``request`` (``send``), once it has ended."""
        return await self.send(request, on_queued=on_queued).collect()

    async def list_models(self) -> list[ModelInfo]:
        """Every model of every enabled host that answers (embedded first), each name once."""
        models: list[ModelInfo] = []
        if self.embedded is not None and await self.embedded.health():
            models += await self.embedded.list_models()
        for host in self.ollama_hosts:
            # An unreachable Ollama only means fewer models to offer.
            with contextlib.suppress(BackendUnavailable):
                listed = await host.backend.list_models()
                host.models = tuple(m.name for m in listed)
                known = {m.name for m in models}
                # An "embedded/" name is always served by the embedded backend, whoever else lists it.
                models += [m for m in listed if not _is_embedded(m.name) and m.name not in known]
        return models

    async def hosts_report(self) -> list[HostReport]:
        """Each host, asked now whether it answers and every model it lists, whatever its name, with its
        queue, the requests it served and those that failed on it, and its recent failures."""
        reports = []
        for host in self.hosts:
            try:
                models = tuple(await host.backend.list_model_names())
            except LLMError as exc:
                if not host.is_down():
                    host.mark_down(str(exc))
                up = False
                models = host.models or ()
            else:
                host.models, up = models, True
                host.mark_up()
            reports.append(
                HostReport(
                    url=host.url,
                    backend=host.backend.name,
                    up=up,
                    models=models,
                    state=host.queue.state(),
                    failures=tuple(host.failures),
                    served=host.served,
                    failed=host.failed,
                )
            )
        return reports

    async def unavailable_reason(self, model: str) -> tuple[str, bool]:
        """Why ``model`` is not served now, in words a user can act on, and whether it is only
        because its backend does not answer (it may come back by itself)."""
        try:
            backend = self.backend_for(model)
        except ModelNotFound as exc:
            return str(exc), False
        if isinstance(backend, EmbeddedBackend):
            if not await backend.health():
                logger.warning("%s is unavailable: %s", model, backend.unreachable())
                return "the bundled model server is not reachable now", True
            return f"the embedded backend has only {EMBEDDED_MODEL}", False
        # Users read these (the turn's refusal): the hosts are named in the log and /api/hosts only.
        answering = await self._ollama_answering()
        if answering is None:
            logger.warning("%s is unavailable: Ollama is not reachable at %s", model, self._ollama_where())
            return "Ollama is not reachable now", True
        logger.warning("%s is unavailable: Ollama at %s does not have it", model, self._ollama_where())
        return f"Ollama does not have it (`ollama pull {model}` fetches it)", False

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
