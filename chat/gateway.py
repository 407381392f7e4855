"""The process-wide LLM gateway, built from the settings (the engine itself reads no settings)."""

from __future__ import annotations

from functools import cache

from django.conf import settings

from engine.llm import Gateway
from engine.llm.embedded import EmbeddedBackend
from engine.llm.ollama_backend import OllamaBackend


@cache
def get_gateway() -> Gateway:
    """The process-wide gateway, configured from settings."""
    return Gateway(
        mode=settings.OLLM_LLM_BACKEND,
        embedded=EmbeddedBackend(host=settings.OLLM_MODEL_SERVER_URL, timeout=settings.OLLAMA_TIMEOUT),
        ollama=[OllamaBackend(host=host, timeout=settings.OLLAMA_TIMEOUT) for host in settings.OLLAMA_HOSTS],
        slots=settings.OLLM_HOST_SLOTS,
        embedded_slots=settings.OLLM_MODEL_SLOTS,
        max_wait=settings.OLLM_BACKGROUND_MAX_WAIT_SECONDS,
        retry_after=settings.OLLM_HOST_RETRY_SECONDS,
    )
