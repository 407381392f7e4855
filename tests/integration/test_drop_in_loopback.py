"""OLLM_LOOPBACK_USER: the drop-in endpoints' requests without a token from this machine act as the
configured user (for clients that cannot send one); from any other address, or with the setting off,
they are refused as before. The address is the peer's (REMOTE_ADDR), never X-Forwarded-For."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client, override_settings

from chat.models import Message, Session
from engine.llm.embedded import MODEL_NAME

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = "Answer in one short sentence."
QUESTIONS = ["Name a city in Japan.", "And one in Italy?", "Which is older?", "Why?", "Thanks, one more: Spain?"]


def ollama_chat(client: Client, messages: list[dict[str, str]], **extra: Any) -> Any:
    body = {"model": MODEL_NAME, "messages": messages, "stream": False, "options": {"num_ctx": 2048}}
    return client.post("/ollama/api/chat", json.dumps(body), content_type="application/json", **extra)


def test_a_conversation_without_a_token_from_this_machine_is_one_session_of_the_configured_user(user, api_gateway):
    client = Client(headers={"User-Agent": "a-tokenless-client/1.0"})
    messages = [{"role": "system", "content": SYSTEM}]
    sessions = set()
    with override_settings(OLLM_LOOPBACK_USER=user.username):
        for number, question in enumerate(QUESTIONS):
            messages.append({"role": "user", "content": question})
            # IPv4, IPv6 and an IPv4-mapped IPv6 peer are all this machine.
            address = ("127.0.0.1", "::1", "::ffff:127.0.0.1")[number % 3]
            response = ollama_chat(client, messages, REMOTE_ADDR=address)
            assert response.status_code == 200, response.content
            sessions.add(response["X-OLLM-Session"])
            messages.append({"role": "assistant", "content": response.json()["message"]["content"]})
    assert len(sessions) == 1
    session = Session.objects.get()
    assert str(session.pk) in sessions
    assert session.owner == user
    assert session.client == "a-tokenless-client/1.0"
    stored = list(Message.objects.filter(session=session).order_by("position").values_list("role", flat=True))
    assert stored == ["user", "assistant"] * len(QUESTIONS)


def test_without_the_setting_a_request_without_a_token_is_refused_from_this_machine_too(user, api_gateway):
    response = ollama_chat(Client(), [{"role": "user", "content": "hi"}], REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 401
    assert "Bearer" in response.json()["error"]
    assert not Session.objects.exists()


@pytest.mark.parametrize("address", ["10.1.2.3", "192.168.1.20", "2001:db8::1", "", "not-an-address"])
def test_with_the_setting_a_request_without_a_token_from_elsewhere_is_refused(user, api_gateway, address):
    with override_settings(OLLM_LOOPBACK_USER=user.username):
        response = ollama_chat(Client(), [{"role": "user", "content": "hi"}], REMOTE_ADDR=address)
        models = Client().get("/v1/models", REMOTE_ADDR=address)
    assert response.status_code == 401
    assert models.status_code == 401
    assert models.json()["error"]["code"] == "invalid_api_key"
    assert not Session.objects.exists()


def test_a_forwarded_for_header_naming_this_machine_does_not_make_a_request_local(user, api_gateway):
    with override_settings(OLLM_LOOPBACK_USER=user.username):
        response = ollama_chat(
            Client(), [{"role": "user", "content": "hi"}], REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="127.0.0.1"
        )
    assert response.status_code == 401


def test_a_bad_token_from_this_machine_is_refused_not_taken_for_the_configured_user(user, api_gateway):
    client = Client(headers={"Authorization": "Bearer not-a-token"})
    with override_settings(OLLM_LOOPBACK_USER=user.username):
        response = ollama_chat(client, [{"role": "user", "content": "hi"}], REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 401


def test_a_setting_naming_no_active_account_maps_nobody(user, api_gateway):
    user.is_active = False
    user.save(update_fields=["is_active"])
    for username in (user.username, "nobody-of-that-name"):
        with override_settings(OLLM_LOOPBACK_USER=username):
            response = Client().get("/ollama/api/tags", REMOTE_ADDR="127.0.0.1")
        assert response.status_code == 401


def test_the_tokens_page_warns_while_the_setting_is_on(user, other_user):
    browser = Client()
    browser.force_login(other_user)
    assert 'id="loopback-warning"' not in browser.get("/account/tokens/").content.decode()
    with override_settings(OLLM_LOOPBACK_USER=user.username):
        page = browser.get("/account/tokens/").content.decode()
    assert 'id="loopback-warning"' in page
    assert f"act as <strong>{user.username}</strong>" in page
