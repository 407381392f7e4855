from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from chat.models import Message, Session
from chat.selectors.context import session_budget
from engine.llm.embedded import MODEL_NAME
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from tests.factories import GREEDY_REPLIES, converse, small_session

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def terminal_gateway(use_gateway, embedded_backend, closed_port_url):
    return use_gateway(Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=closed_port_url)))


@override_settings(OLLM_REPLY_MAX_TOKENS=12, OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES)
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


def test_the_terminal_waits_for_the_compression_its_last_turn_made_due(user, use_gateway, fake_ollama, monkeypatch):
    """The last reply makes a compression due: it runs in a thread of the command's process, which
    ends only once that compression has (it may not even have started when the reply is stored)."""
    use_gateway(Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=60)))
    session = small_session(user)
    index = 0
    # Short turns up to just under the trigger: the user's message alone does not reach it.
    while (budget := session_budget(session=session)).trigger_at - budget.active_tokens > 120:
        converse(session, 1, start=index, answer="Noted.")
        index += 1
    assert not budget.compression_due
    fake_ollama.behaviour.canned_replies = ["A long reply. " * 60, "Summary of the earlier turns."]
    monkeypatch.setattr("sys.stdin", io.StringIO("One more thing?\n"))
    out = io.StringIO()
    call_command("chat", user="alice", session=str(session.pk), stdout=out)
    session.refresh_from_db()
    assert session.compression_count == 1
    assert re.search(r"event (compressed|rollover-complete): ", out.getvalue())
