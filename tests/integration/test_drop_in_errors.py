"""Errors of the Ollama (/ollama/) and OpenAI (/v1/) endpoints: every route answers in its API's own shape,
the same fault reads the same on both, and OpenAI's codes say which fault it is."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from django.test import Client

from chat.models import Message, Session
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME

pytestmark = pytest.mark.django_db(transaction=True)

HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def token_client(api_token, api_gateway):
    return Client(headers={"Authorization": f"Bearer {api_token}"})


def post(client: Client, path: str, body: Mapping[str, Any], **extra: Any) -> Any:
    return client.post(path, json.dumps(body), content_type="application/json", **extra)


@pytest.mark.parametrize("path", ["/ollama/api/nothing", "/ollama/api/chat/extra", "/v1/embeddings", "/v1/x/y"])
def test_an_unknown_route_is_a_404_in_the_apis_shape(token_client, path):
    response = token_client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    if path.startswith("/v1/"):
        assert error["code"] == "unknown_url"
        assert path in error["message"]
    else:
        assert path in error


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("get", "/ollama/api/chat", "POST"),
        ("get", "/ollama/api/generate", "POST"),
        ("post", "/ollama/api/tags", "GET, HEAD"),
        ("delete", "/ollama/", "GET, HEAD"),
        ("get", "/v1/chat/completions", "POST"),
        ("post", "/v1/models", "GET, HEAD"),
    ],
)
def test_a_wrong_method_is_a_405_in_the_apis_shape(token_client, method, path, allowed):
    response = getattr(token_client, method)(path)
    assert response.status_code == 405
    assert response["Allow"] == allowed
    error = response.json()["error"]
    if path.startswith("/v1/"):
        assert error["code"] == "method_not_allowed"
        assert method.upper() in error["message"]
    else:
        assert method.upper() in error


def test_a_missing_model_reads_the_same_on_both_apis(token_client):
    for model in (None, "", 5):
        body = {"messages": HI} if model is None else {"model": model, "messages": HI}
        ollama = post(token_client, "/ollama/api/chat", body)
        openai = post(token_client, "/v1/chat/completions", body)
        assert (ollama.status_code, openai.status_code) == (400, 400)
        assert ollama.json()["error"] == openai.json()["error"]["message"] == "model is required."
    shown = post(token_client, "/ollama/api/show", {})
    assert (shown.status_code, shown.json()["error"]) == (400, "model is required.")
    assert not Session.objects.exists()


def test_openai_codes_tell_a_session_that_is_not_yours_from_a_model_that_is_not_served(token_client, other_user):
    theirs = session_create(owner=other_user, model=MODEL_NAME, context_size=2048, title="Bob's")
    session = post(
        token_client, "/v1/chat/completions", {"model": MODEL_NAME, "messages": HI}, HTTP_X_OLLM_SESSION=str(theirs.pk)
    )
    assert session.status_code == 404
    assert session.json()["error"]["code"] == "session_not_found"
    assert session.json()["error"]["message"] == "No such session of yours."
    model = post(token_client, "/v1/chat/completions", {"model": "no-such-model:1b", "messages": HI})
    assert model.status_code == 404
    assert model.json()["error"]["code"] == "model_not_found"
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    "choice",
    ["required", {"type": "function", "function": {"name": "get_time"}}],
)
def test_a_required_tool_choice_is_refused_on_both_apis_and_stores_nothing(token_client, choice):
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    body = {"model": MODEL_NAME, "messages": HI, "tools": tools, "tool_choice": choice, "stream": False}
    ollama = post(token_client, "/ollama/api/chat", body)
    openai = post(token_client, "/v1/chat/completions", body)
    assert (ollama.status_code, openai.status_code) == (400, 400)
    assert ollama.json()["error"] == openai.json()["error"]["message"]
    assert "tool_choice" in ollama.json()["error"]
    assert openai.json()["error"]["code"] == "tool_choice_not_supported"
    assert not Session.objects.exists()


def test_show_reports_what_the_bundled_model_does_here(token_client):
    shown = post(token_client, "/ollama/api/show", {"model": MODEL_NAME})
    assert shown.json()["capabilities"] == ["completion"]


@pytest.mark.parametrize(("path", "options"), [("/ollama/api/chat", "options"), ("/v1/chat/completions", "")])
def test_a_message_over_the_context_is_stored_once_and_its_session_named(token_client, path, options):
    huge = [{"role": "user", "content": "Describe this: " + "lighthouse keeper, " * 1200}]
    body: dict[str, Any] = {"model": MODEL_NAME, "messages": huge, "stream": False}
    body.update({"options": {"num_ctx": 2048}} if options else {"num_ctx": 2048})
    first = post(token_client, path, body)
    again = post(token_client, path, body)
    assert (first.status_code, again.status_code) == (413, 413)
    assert first["X-OLLM-Session"] == again["X-OLLM-Session"]
    assert Session.objects.count() == 1
    [stored] = Message.objects.all()
    assert str(stored.session_id) == first["X-OLLM-Session"]
    assert stored.excluded_from_context
    if path.startswith("/v1/"):
        assert again.json()["error"]["code"] == "context_length_exceeded"
    else:
        assert "does not fit" in again.json()["error"]
