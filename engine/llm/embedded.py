"""The embedded backend: the bundled SmolLM2-135M, served by ``modelserver`` in a process of its own.

The app talks to it as to Ollama (the same client, the same wire format), so a
crash of the native library costs one request, never a web server or a worker.
Two things Ollama lacks make it exact: ``/api/tokenize`` counts a prompt exactly
as generation will, and the ``X-Ollm-Priority`` header lets chat turns go before
summaries. ``make run``, the Docker image and the test fixtures start the server
(``python -m modelserver --supervise``).

Plain text (a message, a reply) is counted in this process, with the vocabulary the server
hands out once (``/api/vocabulary``, counted by ``engine.core.bpe``), rather than over two HTTP
hops a turn waits on; only once a probe text counted both ways agrees. Prompts are still counted
by the server: it applies the chat template, and keeps the tokens for the generation that follows.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import threading
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

from engine.core.bpe import TextCounter, from_gguf_vocabulary
from engine.core.tokens import VocabularyError
from engine.llm.ollama_backend import OllamaBackend, tls_context, wire_message
from engine.llm.types import (
    BackendUnavailable,
    ChatMessage,
    ChatRequest,
    ChatStream,
    LLMRequestError,
    ModelInfo,
    ModelNotFound,
)

logger = logging.getLogger(__name__)
MODEL_NAME = "embedded/smollm2-135m"
PARAMETER_SIZE_B = 0.135
# Counting a prompt is quick (see docs/benchmarks.md); this only bounds a stuck server.
TOKENIZE_TIMEOUT_SECONDS = 10.0
# Texts counted in one request: about 0.2 MB of an import's messages, well inside that timeout.
TOKENIZE_BATCH = 500
# Counted here and by the server before counting here: digits, runs of spaces and newlines, contractions,
# accents, CJK, an emoji sequence and the template's own markers as text.
COUNT_PROBE = (
    "On 14 March 2026 we'll drive the Yaris 120.5 km to Galway:  café, 東京, 👍🏽👨‍👩‍👧\n\n\tthen   "
    "<|im_end|> x=3.14; it's DONE!!"
)


class _KeptAlive:
    """HTTP connections to one host, kept alive between calls and shared by threads, each call on one
    of its own. A turn counts tokens three times: http.client costs a fraction of an httpx request."""

    def __init__(self, host: str, timeout: float) -> None:
        parts = urlsplit(host)
        self._https = parts.scheme == "https"
        self._address = (parts.hostname or "127.0.0.1", parts.port or (443 if self._https else 80))
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(*self._address, timeout=self._timeout, context=tls_context())
        return http.client.HTTPConnection(*self._address, timeout=self._timeout)

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """The status and body of a POST of ``body`` as JSON. A kept connection the host has closed
        meanwhile (it restarted) is tried once more on a new one. Raises OSError or HTTPException."""
        data = json.dumps(body).encode()
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        while True:
            reused = connection is not None
            connection = connection or self._connect()
            try:
                connection.request("POST", self._prefix + path, data, {"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = response.status, response.read()
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = None
                if reused:
                    continue
                raise
            with self._lock:
                self._idle.append(connection)
            return answer


class EmbeddedBackend(OllamaBackend):
    """The bundled model server at ``host``, which serves ``MODEL_NAME``."""

    name = "embedded"
    label = "the bundled model server"

    def __init__(
        self, *, host: str, timeout: float = 120.0, connect_timeout: float = 3.0, count_locally: bool = True
    ) -> None:
        """``count_locally``: count plain text here with the server's vocabulary once it agrees with the
        server's count (else every count asks the server)."""
        super().__init__(host=host, timeout=timeout, connect_timeout=connect_timeout)
        self._counting = _KeptAlive(host, TOKENIZE_TIMEOUT_SECONDS)
        self._message_overhead: int | None = None
        self._overhead_lock = threading.Lock()
        # None until the probe has run: then the counter, or False when counting here was refused.
        self._text_counter: TextCounter | Literal[False] | None = None if count_locally else False
        self._counter_lock = threading.Lock()

    def unreachable(self) -> str:
        return (
            f"the bundled model server is not reachable at {self.shown_host}: `make run` starts it "
            "(python -m modelserver --supervise); if it just stopped, it is starting again"
        )

    def _check_model(self, model: str) -> None:
        if model != MODEL_NAME:
            raise ModelNotFound(f"model {model} is not available in the embedded backend (it has {MODEL_NAME})")

    def chat(self, request: ChatRequest) -> ChatStream:
        self._check_model(request.model)
        return super().chat(request)

    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = self._post("/api/tokenize", body)
        with self._overhead_lock:
            self._message_overhead = int(answer["message_overhead"])
        return answer

    def count_prompt_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """Exactly the tokens the server will evaluate for ``messages`` (its chat template included)."""
        return int(self._tokenize({"messages": [wire_message(m) for m in messages]})["count"])

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The JSON answer of the model server's ``path`` (counting's own connections, kept alive)."""
        try:
            status, data = self._counting.post(path, {"model": MODEL_NAME, **body})
        except (OSError, http.client.HTTPException) as exc:
            raise BackendUnavailable(self.unreachable()) from exc
        if status != 200:
            text = data.decode("utf-8", errors="replace")
            raise LLMRequestError(f"{self.label} could not count tokens ({status}): {text}")
        answer: dict[str, Any] = json.loads(data)
        return answer

    def _local_counter(self) -> TextCounter | None:
        """The server's vocabulary as a counter here, once it counted COUNT_PROBE as the server does; None
        when the server hands out none, or one ``engine.core.bpe`` does not know, or the counts disagree (logged
        once). Raises BackendUnavailable while the server cannot be reached: it is asked again at the next count."""
        with self._counter_lock:
            if self._text_counter is None:
                try:
                    # A server of an earlier release has no vocabulary to hand out (404): it counts.
                    vocabulary = self._post("/api/vocabulary", {})
                    counter = from_gguf_vocabulary(
                        model=str(vocabulary.get("model", "")),
                        pre=str(vocabulary.get("pre", "")),
                        merges=list(vocabulary.get("merges", [])),
                    )
                except (LLMRequestError, VocabularyError) as exc:
                    logger.warning("%s counts every text: its vocabulary cannot be counted here (%s)", self.label, exc)
                    self._text_counter = False
                else:
                    served = int(self._tokenize({"text": COUNT_PROBE})["count"])
                    agrees = counter.count(COUNT_PROBE) == served
                    if not agrees:
                        logger.warning("%s counts every text: its vocabulary counts a probe otherwise here", self.label)
                    self._text_counter = counter if agrees else False
            return self._text_counter if isinstance(self._text_counter, TextCounter) else None

    def count_text_tokens(self, text: str) -> int:
        return self.count_texts_tokens([text])[0]

    def count_texts_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each of ``texts``: here, or on the server TOKENIZE_BATCH of them a request (one request
        per message made an import of 5,000 messages spend minutes on HTTP round trips)."""
        counter = self._local_counter()
        if counter is not None:
            return [counter.count(text) for text in texts]
        counts: list[int] = []
        for start in range(0, len(texts), TOKENIZE_BATCH):
            answer = self._tokenize({"texts": list(texts[start : start + TOKENIZE_BATCH])})
            counts.extend(int(count) for count in answer["counts"])
        return counts

    def message_overhead(self) -> int:
        """Tokens the chat template adds around one message's content."""
        if self._message_overhead is None:
            self._tokenize({"text": ""})
        assert self._message_overhead is not None
        return self._message_overhead

    async def list_models(self) -> list[ModelInfo]:
        return [await self.model_info(MODEL_NAME)]

    async def model_info(self, model: str) -> ModelInfo:
        self._check_model(model)
        info = await super().model_info(model)
        return ModelInfo(
            name=MODEL_NAME,
            backend=self.name,
            parameter_size_b=PARAMETER_SIZE_B,
            context_length=info.context_length,
            family=info.family,
        )

    async def count_tokens(self, text: str, model: str) -> int | None:
        self._check_model(model)
        return await asyncio.to_thread(self.count_text_tokens, text)
