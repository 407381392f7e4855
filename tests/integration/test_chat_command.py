from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from chat.models import Message, Session
from contextmgr.llm.embedded import MODEL_NAME
from contextmgr.llm.gateway import Gateway
from contextmgr.llm.ollama_backend import OllamaBackend

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def terminal_gateway(use_gateway, embedded_backend, closed_port_url):
    return use_gateway(Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=closed_port_url)))


@override_settings(OLLM_REPLY_MAX_TOKENS=12, OLLM_CHAT_TEMPERATURE=0.0)
def test_chatting_in_a_terminal(user, terminal_gateway, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("What is a token?\n\nAnd a context window?\n"))
    out = io.StringIO()
    call_command("chat", user="alice", context_size=16384, system="Be brief.", stdout=out)
    text = out.getvalue()
    session = Session.objects.get(owner=user)
    # The embedded model's 8,192-token context caps the 16K selection.
    assert (session.model, session.max_tokens) == (MODEL_NAME, 8192)
    assert f"Session {session.id} ({MODEL_NAME}, num_ctx 8,192)" in text
    assert text.count("tokens (exact)") == 2
    assert text.count("Context: ") == 2
    assert list(Message.objects.filter(session=session).values_list("role", flat=True)) == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_chat_refuses_unknown_users_and_sessions(user, terminal_gateway):
    with pytest.raises(CommandError, match="There is no user 'nobody'"):
        call_command("chat", user="nobody")
    with pytest.raises(CommandError, match="alice has no session"):
        call_command("chat", user="alice", session="00000000-0000-0000-0000-000000000000")
