from __future__ import annotations

import socket

import pytest

from contextmgr.llm.embedded import EmbeddedBackend
from contextmgr.llm.ollama_backend import OllamaBackend
from tests.support.fake_ollama import FakeOllama


@pytest.fixture(scope="session")
def embedded_backend():
    """One real SmolLM2 instance for the whole run (it loads in about 0.3 s, but once is enough)."""
    return EmbeddedBackend(n_ctx=4096)


@pytest.fixture(scope="session")
def fake_ollama_server(embedded_backend):
    server = FakeOllama(embedded_backend).start()
    yield server
    server.stop()


@pytest.fixture
def fake_ollama(fake_ollama_server):
    fake_ollama_server.reset()
    yield fake_ollama_server
    fake_ollama_server.reset()


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


@pytest.fixture
def app_gateway(embedded_backend, monkeypatch):
    """The gateway the pages, the socket and the compressions use: the real embedded model."""
    from contextmgr.llm.gateway import Gateway

    gateway = Gateway(mode="embedded", embedded=embedded_backend, ollama=None)
    for module in ("chat.turn", "chat.views", "contextmgr.services.compression"):
        monkeypatch.setattr(f"{module}.get_gateway", lambda: gateway)
    return gateway
