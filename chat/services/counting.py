"""How a stored message is counted, shared by the turn, the imports and the client's conversations:
exact on the embedded model, else the estimate."""

from __future__ import annotations

from engine.core.tokens import TokenCounter
from engine.llm import Gateway, LLMError
from engine.resources import TiktokenCounter


def message_counter(gateway: Gateway, model: str) -> TokenCounter:
    """How messages of ``model`` are counted when stored: exact on the embedded model, else the estimate."""
    try:
        return gateway.token_counter(model)
    except LLMError:
        # The model is unknown to every backend: the message is still stored, with the estimate.
        return TiktokenCounter()
