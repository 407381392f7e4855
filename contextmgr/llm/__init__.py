"""The LLM gateway: every chat reply, summary and aging call of the product goes through here.

Nothing else imports ``ollama``; ``llama_cpp`` runs only in the model server (``modelserver``).
"""

from __future__ import annotations

from functools import cache

from contextmgr.llm.gateway import BackendStatus, Gateway
from contextmgr.llm.types import (
    BackendUnavailable,
    ChatMessage,
    ChatResult,
    ChatStream,
    Completion,
    ContextOverflow,
    LLMError,
    LLMRequestError,
    LLMTimeout,
    ModelInfo,
    ModelNotFound,
)


@cache
def get_gateway() -> Gateway:
    """The process-wide gateway, configured from settings."""
    from django.conf import settings

    from contextmgr.llm.embedded import EmbeddedBackend
    from contextmgr.llm.ollama_backend import OllamaBackend

    return Gateway(
        mode=settings.OLLM_LLM_BACKEND,
        embedded=EmbeddedBackend(host=settings.OLLM_MODEL_SERVER_URL, timeout=settings.OLLAMA_TIMEOUT),
        ollama=OllamaBackend(host=settings.OLLAMA_HOST, timeout=settings.OLLAMA_TIMEOUT),
    )


__all__ = [
    "BackendStatus",
    "BackendUnavailable",
    "ChatMessage",
    "ChatResult",
    "ChatStream",
    "Completion",
    "ContextOverflow",
    "Gateway",
    "LLMError",
    "LLMRequestError",
    "LLMTimeout",
    "ModelInfo",
    "ModelNotFound",
    "get_gateway",
]
