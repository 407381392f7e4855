"""Every drop-in and REST field is read strictly (issue 49, item 6): no boolean for a number, no number for a
text, tools in OpenAI's and Ollama's function shape; the refusal (400 on the drop-in APIs in their own shape,
422 on REST) names the field, and nothing is stored or sent to the model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from chat.models import Decision, Goal, Session
from chat.services.goals import goal_create
from engine.llm.embedded import MODEL_NAME

pytestmark = pytest.mark.django_db
HI = [{"role": "user", "content": "Hi"}]
GOOD_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
BAD_TOOLS = [
    ([1], "tools[0]"),
    ([{"type": "function"}], "tools[0]"),
    ([{"function": {"name": "get_time"}}], "tools[0]"),
    ([{"type": "function", "function": {"name": 123}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": ""}}], "tools[0].function.name"),
    ([GOOD_TOOL, {"type": "function", "function": {"name": "x", "parameters": "{}"}}], "tools[1].function.parameters"),
    ({"type": "function"}, "tools must be a list"),
]


@pytest.fixture
def token_client(api_token, api_gateway, model_server):
    model_server.reset()
    return Client(headers={"Authorization": f"Bearer {api_token}"})


def post(client: Client, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, json.dumps(body), content_type="application/json")


def refused(path: str, response: Any) -> str:
    """The error's message in the API's own shape, after checking it is a 400."""
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    return str(error["message"] if path.startswith("/v1/") else error)


def nothing_reached_the_model(model_server: Any) -> bool:
    return not [r for r in model_server.behaviour.requests if r["path"] in ("/api/chat", "/api/generate")]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/ollama/api/chat"])
@pytest.mark.parametrize(("tools", "named"), BAD_TOOLS)
def test_tools_not_in_the_function_shape_are_refused(token_client, model_server, path, tools, named):
    message = refused(path, post(token_client, path, {"model": MODEL_NAME, "messages": HI, "tools": tools}))
    assert named in message
    assert not Session.objects.exists()
    assert nothing_reached_the_model(model_server)


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("stop", 123, "stop must be a text or a list of texts"),
        ("stop", ["ok", 1], "stop must be a text or a list of texts"),
        ("n", True, "n must be 1"),
        ("stream", "yes", "stream must be true or false"),
        ("stream_options", {"include_usage": "yes"}, "stream_options.include_usage must be true or false"),
        ("stream_options", [], "stream_options must be an object"),
        ("user", 5, "user must be text"),
        ("frequency_penalty", True, "frequency_penalty must be a number"),
        ("presence_penalty", "0.5", "presence_penalty must be a number"),
        ("functions", [{"name": 5}], "functions[0].name"),
        ("temperature", True, "temperature must be a number"),
        ("seed", "1", "seed must be a whole number"),
    ],
)
def test_openai_fields_of_the_wrong_type_are_refused_naming_them(token_client, model_server, field, value, named):
    message = refused(
        "/v1/", post(token_client, "/v1/chat/completions", {"model": MODEL_NAME, "messages": HI, field: value})
    )
    assert named in message
    assert not Session.objects.exists()
    assert nothing_reached_the_model(model_server)


@pytest.mark.parametrize(
    ("path", "extra", "named"),
    [
        ("/ollama/api/chat", {"options": {"stop": 123}}, "options.stop must be a text or a list of texts"),
        ("/ollama/api/chat", {"options": {"mirostat": "2"}}, "options.mirostat must be a number"),
        ("/ollama/api/chat", {"options": {"min_p": True}}, "options.min_p must be a number"),
        ("/ollama/api/chat", {"options": {"use_mmap": 1}}, "options.use_mmap must be true or false"),
        ("/ollama/api/chat", {"stream": "no"}, "stream must be true or false"),
        ("/ollama/api/chat", {"keep_alive": True}, "keep_alive must be a number"),
        ("/ollama/api/generate", {"context": "abc"}, "context must be a list of token ids"),
        ("/ollama/api/generate", {"context": [1, True]}, "context must be a list of token ids"),
        ("/ollama/api/generate", {"raw": "yes"}, "raw must be true or false"),
        ("/ollama/api/generate", {"template": 1}, "template must be text"),
    ],
)
def test_ollama_fields_of_the_wrong_type_are_refused_naming_them(token_client, model_server, path, extra, named):
    body = {"model": MODEL_NAME, **({"messages": HI} if path.endswith("chat") else {"prompt": "Hi"}), **extra}
    assert named in refused(path, post(token_client, path, body))
    assert not Session.objects.exists()
    assert nothing_reached_the_model(model_server)


def test_well_formed_fields_still_pass(token_client, settings):
    settings.OLLM_REPLY_MAX_TOKENS = 1  # the turn each lets through stays quick
    openai = post(token_client, "/v1/chat/completions", {
        "model": MODEL_NAME, "messages": HI, "tools": [GOOD_TOOL], "stop": ["\n"], "user": "alice", "n": 1,
        "stream": False, "frequency_penalty": 0, "stream_options": {"include_usage": True},
    })  # fmt: skip
    assert openai.status_code == 200, openai.content
    ollama = post(token_client, "/ollama/api/generate", {
        "model": MODEL_NAME, "prompt": "Hi", "context": [1, 2, 3], "stream": False, "keep_alive": "5m",
        "options": {"stop": ["\n"], "mirostat": 0, "use_mmap": True},
    })  # fmt: skip
    assert ollama.status_code == 200, ollama.content


# --- REST -----------------------------------------------------------------------------------------------


def rest_refused(response: Any, field: str) -> None:
    assert response.status_code == 422, response.content
    assert any(problem["loc"][-1] == field for problem in response.json()["detail"]), response.json()


def test_a_branch_at_position_true_is_refused(owner_client, chat_session, api_gateway):
    response = post(owner_client, f"/api/sessions/{chat_session.pk}/branch", {"position": True})
    rest_refused(response, "position")
    assert Session.objects.count() == 1


def test_a_decision_locked_yes_is_refused(owner_client, chat_session):
    goal = goal_create(session=chat_session, description="Ship it")
    rest_refused(
        post(owner_client, f"/api/goals/{goal.pk}/decisions", {"description": "Use X", "locked": "yes"}), "locked"
    )
    rest_refused(post(owner_client, f"/api/goals/{goal.pk}/decisions", {"description": 5}), "description")
    assert not Decision.objects.exists()
    assert Goal.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": MODEL_NAME, "context_size": "16384"}, "context_size"),
        ({"model": MODEL_NAME, "context_size": True}, "context_size"),
        ({"model": MODEL_NAME, "context_size": 16384, "title": 5}, "title"),
        ({"model": 1, "context_size": 16384}, "model"),
    ],
)
def test_a_session_of_the_wrong_types_is_refused(owner_client, api_gateway, body, field):
    rest_refused(post(owner_client, "/api/sessions", body), field)
    assert not Session.objects.exists()


def test_a_message_that_is_not_text_is_refused(owner_client, chat_session):
    rest_refused(post(owner_client, f"/api/sessions/{chat_session.pk}/messages", {"content": 5}), "content")
    assert not chat_session.messages.exists()


def test_a_patch_of_the_wrong_type_is_refused(owner_client, chat_session):
    response = owner_client.patch(
        f"/api/sessions/{chat_session.pk}", json.dumps({"title": False}), content_type="application/json"
    )
    rest_refused(response, "title")
    chat_session.refresh_from_db()
    assert chat_session.title != "False"
