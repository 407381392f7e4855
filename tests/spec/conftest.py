"""Fixtures of the spec conformance suite.

Compressions are driven through the Ollama stand-in (real HTTP, the official
client, the gateway's error mapping), mostly with a canned summary so that no
test waits for the model; the LLM's fixtures are those of the integration suite.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from chat.models import Session
from chat.services import message_create, session_create
from contextmgr.llm.gateway import Gateway
from contextmgr.llm.ollama_backend import OllamaBackend
from contextmgr.models import Checkpoint, ContextEvent
from contextmgr.selectors import session_budget
from contextmgr.services.compression import CompressionOutcome
from tests.integration.conftest import app_model_server, embedded_backend, fake_ollama  # noqa: F401
from tests.support.model_server import SERVED_MODEL

# Plain prose without paths, numbers, quotes or decisions: no key facts, so a
# canned summary is never retried for lost facts and each compression is one call.
ANSWER = (
    "The answer walks through the idea step by step and explains why each part matters for the reader. "
    "It closes with a short recap of the main points so far. "
)
# A Tier 3 selection (16K, three checkpoints kept) squeezed so that a few turns reach the trigger.
TIER3 = 16384
TIER2 = 8192
SMALL_CONTEXTS = {SERVED_MODEL: {TIER3: 1500, TIER2: 1200, 4096: 1200}}


@pytest.fixture
def gateway(fake_ollama):  # noqa: F811
    return Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=30))


def small_session(owner, *, context_size: int = TIER3, system_prompt: str = "Be brief.", **settings) -> Session:
    """A session of the served model on a squeezed context; ``settings`` are its compression/snapshot overrides."""
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL_CONTEXTS):
        return session_create(
            owner=owner,
            model=SERVED_MODEL,
            context_size=context_size,
            system_prompt=system_prompt,
            settings=settings or {"compression": {"summary_max_tokens": 128}},
        )


def converse(session: Session, turns: int, *, start: int = 0, answer: str = ANSWER) -> None:
    """``turns`` question/answer pairs appended to the history."""
    for index in range(start, start + turns):
        message_create(session=session, role="user", content=f"Question number {index}, please?")
        message_create(session=session, role="assistant", content=answer * 2)


def until_due(session: Session, *, start: int = 0) -> int:
    """Converse until the budget calls for a compression; returns the next turn index."""
    index = start
    while not session_budget(session=session).compression_due:
        converse(session, 1, start=index)
        index += 1
        assert index < start + 200, "the session never reached its trigger"
    return index


def event_types(session: Session) -> list[str]:
    return list(ContextEvent.objects.filter(session=session).order_by("id").values_list("type", flat=True))


@pytest.fixture
def due_session(user):
    """A Tier 3 session whose active conversation has just reached the trigger."""
    session = small_session(user)
    until_due(session)
    return session


def created(outcome: CompressionOutcome) -> Checkpoint:
    """The checkpoint a compression or rollover created (or carried over)."""
    assert outcome.checkpoint_id is not None, outcome
    return Checkpoint.objects.get(pk=outcome.checkpoint_id)
