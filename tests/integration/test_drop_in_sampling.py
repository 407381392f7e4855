"""A drop-in request's sampling: Ollama's ``options`` and OpenAI's ``temperature``, ``top_p`` and ``seed``
go to the model for that request, over the session's settings, which the next request gets again.
Streaming through the real clients: test_drop_in_clients.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from chat.models import Message, Session
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME
from tests.factories import sampled_options

pytestmark = pytest.mark.django_db(transaction=True)

SESSION_SAMPLING = {"temperature": 0.3, "repeat_penalty": 1.2}


@pytest.fixture(autouse=True)
def _short_replies(settings):
    settings.OLLM_REPLY_MAX_TOKENS = 4


@pytest.fixture
def client(api_token, api_gateway):
    return Client(headers={"Authorization": f"Bearer {api_token}"})


@pytest.fixture
def tuned(user):
    """alice's session whose replies are sampled at temperature 0.3 with a repeat penalty of 1.2."""
    return session_create(owner=user, model=MODEL_NAME, context_size=2048, settings={"sampling": SESSION_SAMPLING})


def post(client: Client, path: str, session: Session, body: dict[str, Any]) -> Any:
    return client.post(path, json.dumps(body), content_type="application/json", HTTP_X_OLLM_SESSION=str(session.pk))


def ollama_body(content: str, **options: Any) -> dict[str, Any]:
    return {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": content}],
        "stream": False,
        "options": options,
    }


def test_ollamas_options_override_the_sessions_sampling_for_their_request_only(client, tuned, fake_ollama):
    asked = {"temperature": 0.9, "top_k": 7, "top_p": 0.6, "repeat_penalty": 1.05, "repeat_last_n": 32, "seed": 11}
    assert post(client, "/ollama/api/chat", tuned, ollama_body("Name a colour.", **asked)).status_code == 200
    assert post(client, "/ollama/api/chat", tuned, ollama_body("Another one.")).status_code == 200
    assert post(client, "/ollama/api/chat", tuned, ollama_body("And one more.", temperature=0)).status_code == 200
    assert sampled_options(fake_ollama) == [asked, SESSION_SAMPLING, {**SESSION_SAMPLING, "temperature": 0.0}]


def test_generate_takes_options_too(client, tuned, fake_ollama):
    body = {"model": MODEL_NAME, "prompt": "Name a planet.", "stream": False, "options": {"top_k": 3}}
    assert post(client, "/ollama/api/generate", tuned, body).status_code == 200
    assert sampled_options(fake_ollama) == [{**SESSION_SAMPLING, "top_k": 3}]


def test_openais_temperature_top_p_and_seed_are_applied_and_its_penalties_are_not(client, tuned, fake_ollama):
    body = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "temperature": 1.1,
        "top_p": 0.7,
        "seed": 5,
        "frequency_penalty": 0.5,
        "presence_penalty": 0.5,
    }
    assert post(client, "/v1/chat/completions", tuned, body).status_code == 200
    assert sampled_options(fake_ollama) == [{"temperature": 1.1, "top_p": 0.7, "seed": 5, "repeat_penalty": 1.2}]


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        (
            "/ollama/api/chat",
            ollama_body("Hi", temperature=5),
            "options.temperature must be a number from 0 to 2 (or null: the model's default), not 5.",
        ),
        ("/ollama/api/chat", ollama_body("Hi", top_k=-3), "options.top_k must be a whole number of 0 or more"),
        ("/ollama/api/chat", ollama_body("Hi", repeat_penalty="high"), "options.repeat_penalty must be a number"),
        (
            "/v1/chat/completions",
            {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "top_p": 2},
            "top_p must be a number from 0 to 1",
        ),
        (
            "/v1/chat/completions",
            {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "seed": 1.5},
            "seed must be a whole number of -1 or more",
        ),
    ],
)
def test_sampling_out_of_range_is_refused_in_the_apis_shape_and_stores_nothing(client, user, path, body, says):
    response = client.post(path, json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert says in (error["message"] if path.startswith("/v1/") else error)
    assert not Session.objects.exists()
    assert not Message.objects.exists()
