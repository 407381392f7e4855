"""A client's cap on the reply holds (issue 49, item 2): ``max_tokens`` and ``max_completion_tokens`` on /v1,
``options.num_predict`` on /ollama and ``max_tokens`` on the REST message are checked (a positive integer of at
most the reply cap, else 400, or 422 on REST, before anything is stored) and passed to the model call: the
reply stops there, with ``finish_reason``/``done_reason`` "length"."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from chat.models import Message, Session
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME

pytestmark = pytest.mark.django_db
CAP = 5
# Asks for far more than five tokens.
LONG = [{"role": "user", "content": "Write a long story about a lighthouse keeper and his cat, in ten paragraphs."}]


@pytest.fixture
def client_of_alice(api_token, api_gateway, model_server):
    model_server.reset()
    return Client(headers={"Authorization": f"Bearer {api_token}"})


def post(client: Client, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, json.dumps(body), content_type="application/json")


def sent_num_predict(model_server: Any) -> list[int]:
    return [r["options"]["num_predict"] for r in model_server.behaviour.requests if r["path"] == "/api/chat"]


def stored_reply() -> Message:
    return Message.objects.filter(role=Message.Role.ASSISTANT).get()


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_openai_max_tokens_stops_the_reply_there(client_of_alice, model_server, field):
    response = post(client_of_alice, "/v1/chat/completions", {"model": MODEL_NAME, "messages": LONG, field: CAP})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert 0 < body["usage"]["completion_tokens"] <= CAP
    assert sent_num_predict(model_server) == [CAP]
    assert stored_reply().done_reason == "length"


# A streamed answer's turn runs in a thread of its own (chat.services.turn.shell): it reads committed rows only.
@pytest.mark.django_db(transaction=True)
def test_openai_max_tokens_holds_while_streaming(client_of_alice, model_server):
    body = {"model": MODEL_NAME, "messages": LONG, "max_tokens": CAP, "stream": True}
    response = post(client_of_alice, "/v1/chat/completions", body)
    assert response.status_code == 200

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    text = async_to_sync(read)().decode()
    events = [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: {")]
    assert [e["choices"][0]["finish_reason"] for e in events if e.get("choices")][-1] == "length"
    assert sent_num_predict(model_server) == [CAP]


@pytest.mark.parametrize("path", ["/ollama/api/chat", "/ollama/api/generate"])
def test_ollama_num_predict_stops_the_reply_there(client_of_alice, model_server, path):
    body: dict[str, Any] = {"model": MODEL_NAME, "stream": False, "options": {"num_predict": CAP}}
    if path.endswith("chat"):
        body["messages"] = LONG
    else:
        body["prompt"] = LONG[0]["content"]
    response = post(client_of_alice, path, body)
    assert response.status_code == 200, response.content
    assert response.json()["done_reason"] == "length"
    assert 0 < response.json()["eval_count"] <= CAP
    assert sent_num_predict(model_server) == [CAP]
    assert stored_reply().done_reason == "length"


NOT_A_CAP = [-1, 0, 2**63, True, "5", 5.0]


def expected(field: str, value: Any) -> str:
    """A value that is no cap at all, or a turn's cap over the reply cap (512 here)."""
    if value == 513:
        return f"{field} must be a positive integer of at most 512 (the reply cap)."
    return f"{field} must be a positive integer of at most 1,048,576."


@pytest.mark.parametrize("value", [*NOT_A_CAP, 513])
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_openai_refuses_a_cap_that_is_not_a_positive_integer_within_the_reply_cap(client_of_alice, field, value):
    response = post(client_of_alice, "/v1/chat/completions", {"model": MODEL_NAME, "messages": LONG, field: value})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"] == expected(field, value)
    assert not Session.objects.exists()


@pytest.mark.parametrize("value", [*NOT_A_CAP, 513])
def test_ollama_refuses_a_num_predict_that_is_not_a_positive_integer_within_the_reply_cap(client_of_alice, value):
    body = {"model": MODEL_NAME, "messages": LONG, "stream": False, "options": {"num_predict": value}}
    response = post(client_of_alice, "/ollama/api/chat", body)
    assert response.status_code == 400, response.content
    assert response.json() == {"error": expected("options.num_predict", value)}
    assert not Session.objects.exists()


def test_a_background_task_s_larger_cap_is_held_under_the_task_cap(client_of_alice, model_server, settings):
    """Open WebUI asks max_tokens 1,000 for a chat's title: a task has no session, so its cap is the task
    cap (OLLM_CLIENT_TASK_MAX_TOKENS), not a refusal."""
    settings.OLLM_CLIENT_TASK_MAX_TOKENS = 8
    # Open WebUI's title template, cut short (its whole prompt took over a minute on a busy machine).
    prompt = '### Task:\nGenerate a title.\nJSON format: { "title": "..." }\n<chat_history>\nUSER: Hi\n</chat_history>'
    title = [{"role": "user", "content": prompt}]
    response = post(
        client_of_alice, "/v1/chat/completions", {"model": MODEL_NAME, "messages": title, "max_tokens": 1000}
    )
    assert response.status_code == 200, response.content
    assert "X-OLLM-Session" not in response.headers
    assert sent_num_predict(model_server) == [8]
    assert not Session.objects.exists()


@pytest.fixture
def embedded_session(user):
    # A 2K selection: num_ctx 1,700, whose reply cap is 15% of it, 255 tokens.
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048, system_prompt="Be brief.")
    assert session.max_tokens == 1700
    return session


def test_rest_max_tokens_stops_the_reply_there(owner_client, embedded_session, api_gateway, model_server):
    model_server.reset()
    response = owner_client.post(
        f"/api/sessions/{embedded_session.pk}/messages",
        {"content": LONG[0]["content"], "max_tokens": CAP},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["assistant_message"]["done_reason"] == "length"
    assert sent_num_predict(model_server) == [CAP]


@pytest.mark.parametrize("value", [-1, 0, 2**63, True, "5", 5.0, 256])
def test_rest_refuses_a_cap_that_is_not_a_positive_integer_within_the_session_s_cap(
    owner_client, embedded_session, api_gateway, value
):
    response = owner_client.post(
        f"/api/sessions/{embedded_session.pk}/messages",
        {"content": "Hi", "max_tokens": value},
        content_type="application/json",
    )
    assert response.status_code == 422, response.content
    assert "max_tokens" in json.dumps(response.json())
    assert not embedded_session.messages.exists()
