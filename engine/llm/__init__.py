"""The LLM gateway: every chat reply, summary and aging call of the product goes through here.

Nothing else imports ``ollama``; llama.cpp (``xllamacpp``) runs only in the model server (``modelserver``).
"""

from __future__ import annotations

from engine.llm.gateway import BackendStatus, Gateway
from engine.llm.types import (
    GREEDY,
    BackendUnavailable,
    ChatMessage,
    ChatRequest,
    ChatResult,
    ChatStream,
    Completion,
    ContextOverflow,
    HostReport,
    LLMError,
    LLMRequestError,
    LLMTimeout,
    ModelInfo,
    ModelNotFound,
    Sampling,
)

__all__ = [
    "GREEDY",
    "BackendStatus",
    "BackendUnavailable",
    "ChatMessage",
    "ChatRequest",
    "ChatResult",
    "ChatStream",
    "Completion",
    "ContextOverflow",
    "Gateway",
    "HostReport",
    "LLMError",
    "LLMRequestError",
    "LLMTimeout",
    "ModelInfo",
    "ModelNotFound",
    "Sampling",
]
