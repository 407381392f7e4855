from __future__ import annotations

import socket

import pytest

from contextmgr.llm import get_gateway
from contextmgr.llm.embedded import EmbeddedBackend
from contextmgr.llm.ollama_backend import OllamaBackend


@pytest.fixture(scope="session", autouse=True)
def app_model_server(model_server):
    """The app's own gateway (``get_gateway``) reaches the tests' model server."""
    from django.conf import settings

    previous = settings.OLLM_MODEL_SERVER_URL
    settings.OLLM_MODEL_SERVER_URL = model_server.url
    get_gateway.cache_clear()
    yield model_server
    settings.OLLM_MODEL_SERVER_URL = previous
    get_gateway.cache_clear()


@pytest.fixture(scope="session")
def embedded_backend(model_server):
    """The embedded backend, as the app makes it: a client of the bundled model server."""
    return EmbeddedBackend(host=model_server.url, timeout=120)


@pytest.fixture
def fake_ollama(model_server):
    """The same server as Ollama's stand-in (model ``SERVED_MODEL``), behaving normally at the start."""
    model_server.reset()
    yield model_server
    model_server.reset()


@pytest.fixture
def closed_port_url():
    """An address where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def ollama_backend(fake_ollama):
    return OllamaBackend(host=fake_ollama.url, timeout=60)


# The gateway of the REST API, the pages and the socket in their tests.

API_GATEWAY_USERS = (
    "chat.api.get_gateway",
    "chat.selectors.get_gateway",
    "chat.imports.get_gateway",
    "chat.turn.get_gateway",
    "chat.views.get_gateway",
    "contextmgr.api.get_gateway",
    "contextmgr.services.compression.get_gateway",
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
    from contextmgr.llm.gateway import Gateway

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
def app_gateway(use_gateway, embedded_backend):
    """The gateway the pages, the socket and the compressions use: the real embedded model."""
    from contextmgr.llm.gateway import Gateway

    return use_gateway(Gateway(mode="embedded", embedded=embedded_backend, ollama=None))
