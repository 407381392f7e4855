"""How a chat reply is sampled: the session's settings, with what one request of an outside client asks
for (Ollama's ``options``, OpenAI's ``temperature``, ``top_p``, ``seed``) over them, for that request only."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace

from chat.models import Session
from chat.selectors.context import session_sampling
from engine.llm.types import SERVER_DEFAULTS, Sampling

# A context variable rather than an argument: the request's values reach the turn's call to the model
# whichever turn answers it (run or retry), and every other door's turns never see them.
_requested: ContextVar[Sampling] = ContextVar("requested_sampling", default=SERVER_DEFAULTS)


@contextmanager
def sampling_requested(sampling: Sampling) -> Iterator[None]:
    """Within the block (one request's turn), replies take the values ``sampling`` sets over the session's."""
    token = _requested.set(sampling)
    try:
        yield
    finally:
        _requested.reset(token)


def reply_sampling(session: Session) -> Sampling:
    """The sampling of the session's next reply: its settings, and the request's over them."""
    return replace(session_sampling(session), **_requested.get().options())
