from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from tests.support.model_server import SERVED_MODEL


@pytest.fixture
def gateway_at(monkeypatch, embedded_backend):
    def use(mode: str, host: str) -> None:
        gateway = Gateway(mode=mode, embedded=embedded_backend, ollama=OllamaBackend(host=host))
        monkeypatch.setattr("chat.management.commands.llm_check.get_gateway", lambda: gateway)

    return use


def test_llm_check_on_a_fresh_machine_uses_the_embedded_model(gateway_at, closed_port_url):
    gateway_at("auto", closed_port_url)
    out = io.StringIO()
    call_command("llm_check", "--max-tokens", "12", stdout=out)
    text = out.getvalue()
    assert f"Backend: embedded (mode auto): Ollama is not reachable at {closed_port_url}" in text
    assert f"{EMBEDDED_MODEL:<32} embedded  0.135B       context 8,192  (llama)" in text
    said = text.split(f"{EMBEDDED_MODEL} says: ", 1)[1].split("\n\n", 1)[0]
    assert said.strip()
    assert "generated (length)" in text or "generated (stop)" in text


def test_llm_check_with_ollama_lists_both(gateway_at, fake_ollama):
    gateway_at("auto", fake_ollama.url)
    out = io.StringIO()
    call_command("llm_check", "--max-tokens", "4", stdout=out)
    assert "Backend: ollama" in out.getvalue()
    assert SERVED_MODEL in out.getvalue()
    assert EMBEDDED_MODEL in out.getvalue()


def test_llm_check_reports_errors_clearly(gateway_at, closed_port_url):
    gateway_at("ollama", closed_port_url)
    with pytest.raises(CommandError, match="No model is available"):
        call_command("llm_check", stdout=io.StringIO())
    gateway_at("auto", closed_port_url)
    with pytest.raises(CommandError, match="Ollama is not reachable"):
        call_command("llm_check", "--model", "nope:1b", stdout=io.StringIO())
