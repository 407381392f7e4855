"""Fixtures of the integration suite; those it shares with tests/spec are in tests/conftest.py,
its plain helpers in tests/factories.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chat.models import Session
from chat.selectors.context import session_budget
from engine.llm.embedded import MODEL_NAME
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from tests.factories import (
    E2E_USERNAME,
    LOGIN_ANSWER,
    LOGIN_QUESTION,
    TIER2,
    WRITER_SIZE_B,
    converse,
    small_session,
)
from tests.support.drop_in import DropIn
from tests.support.live_server import manage, serve
from tests.support.model_server import ModelServerProcess, free_port


@pytest.fixture(scope="session", autouse=True)
def _app_model_server(app_model_server):
    """Every test here: the app's own gateway reaches the tests' model server."""
    return app_model_server


@pytest.fixture
def closed_port_url():
    """An address where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def ollama_backend(fake_ollama):
    return OllamaBackend(host=fake_ollama.url, timeout=60)


# The gateway of the REST API, the pages and the socket in their tests.

API_GATEWAY_USERS = (
    "chat.selectors.sessions.get_gateway",
    "chat.services.files.imports.get_gateway",
    "chat.services.turn.take.get_gateway",
    "chat.services.conversations.get_gateway",
    "chat.selectors.prompt.get_gateway",
    "chat.services.compression.run.get_gateway",
)


@pytest.fixture
def use_gateway(monkeypatch):
    """Route every LLM call the API makes to ``gateway``."""

    def use(gateway):
        for name in API_GATEWAY_USERS:
            monkeypatch.setattr(name, lambda: gateway)
        return gateway

    return use


@pytest.fixture
def api_gateway(use_gateway, embedded_backend, closed_port_url):
    """The embedded model, and an Ollama that does not answer."""
    return use_gateway(
        Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=closed_port_url, timeout=5))
    )


@pytest.fixture
def owner_client(user):
    """A browser logged in as alice."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def api_token(user):
    from accounts.services import api_token_create

    return api_token_create(user=user, name="tests")[1]


@pytest.fixture
def api(api_token, api_gateway):
    """A client that authenticates with alice's API token."""
    from django.test import Client

    return Client(headers={"Authorization": f"Bearer {api_token}"})


@pytest.fixture
def bob_api(other_user, api_gateway):
    from django.test import Client

    from accounts.services import api_token_create

    return Client(headers={"Authorization": f"Bearer {api_token_create(user=other_user, name='bob')[1]}"})


@pytest.fixture
def embedded_gateway(embedded_backend):
    """A gateway to the real embedded model, passed to what a test calls (no app code is patched)."""
    return Gateway(mode="embedded", embedded=embedded_backend, ollama=None)


@pytest.fixture
def app_gateway(use_gateway, embedded_gateway):
    """The gateway the pages, the socket and the compressions use: the real embedded model."""
    return use_gateway(embedded_gateway)


@pytest.fixture
def small_session_settings():
    """The settings of ``small_session``: the defaults (a module overrides this fixture for others)."""
    return {}


@pytest.fixture(name="small_session")
def embedded_small_session(user, small_session_settings):
    """A 2K session of the embedded model (1,700 tokens) that answers in one sentence."""
    return small_session(
        user,
        model=MODEL_NAME,
        context_size=2048,
        system_prompt="Answer in one sentence.",
        contexts=None,
        settings=small_session_settings,
    )


@pytest.fixture
def due_session(user):
    """An 8K session of the served model squeezed to 1,200 tokens, whose active conversation has
    reached the trigger; its second answer marks a locked decision and a file."""
    session = small_session(user, context_size=TIER2, compression={"summary_max_tokens": 48})
    converse(session, 18, question=LOGIN_QUESTION, answer=LOGIN_ANSWER, markers_at=1)
    assert session_budget(session=session).compression_due
    return session


@pytest.fixture
def writer(due_session):
    """``due_session``'s model made one whose summaries are asked for (``WRITER_SIZE_B``): a small
    model (the served one, 135M) is asked for none, the extract stands."""
    Session.objects.filter(pk=due_session.pk).update(model_parameter_size_b=WRITER_SIZE_B)
    due_session.refresh_from_db()
    return due_session


@pytest.fixture(scope="module")
def drop_in(tmp_path_factory: pytest.TempPathFactory, model_server: ModelServerProcess) -> Iterator[DropIn]:
    """The site over HTTP (daphne, as `make run` serves it) and alice's API token, for the real clients."""
    work = tmp_path_factory.mktemp("drop-in")
    with serve(work, model_server, with_user=True) as url:
        token = manage(work, model_server, "create_api_token", E2E_USERNAME, "--name", "drop-in tests").strip()
        yield DropIn(url, token)
