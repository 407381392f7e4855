"""The drop-in endpoints read a body within the REST import's limits (issue 36): too large is 413, nested deeper
than it allows or holding NaN/Infinity is 400, each in its API's own error shape; extreme values find no 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat.formats.file_checks import MAX_IMPORT_BYTES, MAX_IMPORT_DEPTH, MAX_TOOL_SCHEMA_DEPTH
from engine.llm.embedded import MODEL_NAME

pytestmark = pytest.mark.django_db
CHAT_PATHS = ("/ollama/api/chat", "/v1/chat/completions")
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def client_of_alice(api_token, api_gateway, settings):
    settings.OLLM_REPLY_MAX_TOKENS = 1  # a turn that an example lets through stays quick
    return Client(headers={"Authorization": f"Bearer {api_token}"})


def error_text(path: str, response: Any) -> str:
    """The error's message, read the way the API's own clients read it."""
    error = response.json()["error"]
    return str(error["message"] if path.startswith("/v1/") else error)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("path", CHAT_PATHS)
@pytest.mark.parametrize("depth", [MAX_IMPORT_DEPTH, 50_000])
def test_a_body_nested_deeper_than_the_import_allows_is_400(client_of_alice, path, depth):
    # The body itself is one level; its messages hold the rest.
    body = f'{{"model": "{MODEL_NAME}", "stream": false, "messages": {nested(depth)}}}'
    response = client_of_alice.post(path, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert error_text(path, response) == f"The body is nested more than {MAX_IMPORT_DEPTH} levels deep."


@pytest.mark.parametrize("path", CHAT_PATHS)
def test_a_body_as_deep_as_the_import_allows_is_read(client_of_alice, path):
    messages = json.dumps([{"role": "user", "content": "Hi", "images": json.loads(nested(MAX_IMPORT_DEPTH - 3))}])
    body = f'{{"model": "{MODEL_NAME}", "stream": false, "messages": {messages}}}'
    response = client_of_alice.post(path, body, content_type="application/json")
    assert "nested" not in response.content.decode()


@pytest.mark.parametrize("path", CHAT_PATHS)
def test_a_body_over_the_import_s_size_is_413(client_of_alice, path):
    body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "x" * MAX_IMPORT_BYTES}]})
    response = client_of_alice.post(path, body, content_type="application/json")
    assert response.status_code == 413, response.content
    assert "too large" in error_text(path, response)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/ollama/api/chat", '{"model": "%s", "messages": [], "options": {"temperature": NaN}}'),
        ("/ollama/api/chat", '{"model": "%s", "messages": [], "options": {"top_p": -Infinity}}'),
        ("/ollama/api/chat", '{"model": "%s", "messages": [], "options": {"temperature": 1e400}}'),
        ("/v1/chat/completions", '{"model": "%s", "messages": [], "temperature": NaN}'),
        ("/v1/chat/completions", '{"model": "%s", "messages": [], "top_p": Infinity}'),
    ],
)
def test_a_sampling_value_that_is_not_a_finite_number_is_400(client_of_alice, path, body):
    response = client_of_alice.post(path, body % MODEL_NAME, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "not" in error_text(path, response)


@pytest.mark.parametrize("path", CHAT_PATHS)
def test_a_context_beyond_any_model_s_is_400(client_of_alice, path):
    body: dict[str, Any] = {"model": MODEL_NAME, "messages": HI, "stream": False}
    if path.startswith("/v1/"):
        body["num_ctx"] = 10**15
    else:
        body["options"] = {"num_ctx": 10**15}
    response = client_of_alice.post(path, json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    assert "at most 1,048,576" in error_text(path, response)


NUMBERS = st.one_of(
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e308", "1" * 5000, "2e-400", "-0.0"]),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
OPTIONS = ("temperature", "top_p", "top_k", "repeat_penalty", "repeat_last_n", "seed", "num_ctx")


@given(
    path=st.sampled_from(CHAT_PATHS),
    values=st.dictionaries(st.sampled_from(OPTIONS), NUMBERS, min_size=1, max_size=3),
    depth=st.one_of(st.just(0), st.integers(min_value=1, max_value=60_000)),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_extreme_values_in_a_drop_in_body_find_no_server_error(client_of_alice, path, values, depth):
    options = "{" + ", ".join(f'"{name}": {value}' for name, value in values.items()) + "}"
    extra = f'"options": {options}' if path.startswith("/ollama/") else options[1:-1]
    content = f'"content": "Hi", "images": {nested(depth)}' if depth else '"content": "Hi"'
    body = f'{{"model": "{MODEL_NAME}", "stream": false, "messages": [{{"role": "user", {content}}}], {extra}}}'
    response = client_of_alice.post(path, body, content_type="application/json")
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        assert error_text(path, response)


def tool_schema(depth: int) -> dict[str, Any]:
    """A function's parameters ``depth`` objects deep: an object property inside an object property..."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


def with_tool(path: str, parameters: dict[str, Any]) -> str:
    tool = {"type": "function", "function": {"name": "lookup", "description": "Look up.", "parameters": parameters}}
    return json.dumps({"model": MODEL_NAME, "stream": False, "messages": HI, "tools": [tool]})


def nesting(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    return 0


@pytest.mark.parametrize("path", CHAT_PATHS)
def test_an_ordinary_tool_schema_deeper_than_the_body_cap_is_read(client_of_alice, path):
    # A small request (well under 1 KB) whose schema nests object properties nine deep: 21 levels in all.
    body = with_tool(path, tool_schema(9))
    assert len(body) < 1024
    assert nesting(json.loads(body)) > MAX_IMPORT_DEPTH
    response = client_of_alice.post(path, body, content_type="application/json")
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("path", CHAT_PATHS)
def test_a_tool_schema_may_reach_the_tool_cap_and_no_further(client_of_alice, path):
    # Body, tools, a tool, its function: the schema starts four levels in.
    deepest = json.loads(with_tool(path, tool_schema(1)))["tools"][0]["function"]["parameters"]
    assert nesting(deepest) == 1
    levels = (MAX_TOOL_SCHEMA_DEPTH - 4 + 1) // 2  # each level of the schema is two objects
    at_cap = with_tool(path, tool_schema(levels))
    assert nesting(json.loads(at_cap)) <= MAX_TOOL_SCHEMA_DEPTH
    assert "nested" not in client_of_alice.post(path, at_cap, content_type="application/json").content.decode()
    beyond = with_tool(path, tool_schema(levels + 1))
    assert nesting(json.loads(beyond)) > MAX_TOOL_SCHEMA_DEPTH
    response = client_of_alice.post(path, beyond, content_type="application/json")
    assert response.status_code == 400, response.content
    assert error_text(path, response) == (
        f"A tool's parameters in the body are nested more than {MAX_TOOL_SCHEMA_DEPTH} levels deep."
    )


@pytest.mark.parametrize("path", CHAT_PATHS)
def test_the_body_cap_still_holds_outside_a_tool_schema(client_of_alice, path):
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {}, "x": json.loads(nested(20))}}
    body = json.dumps({"model": MODEL_NAME, "stream": False, "messages": HI, "tools": [tool]})
    response = client_of_alice.post(path, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert error_text(path, response) == f"The body is nested more than {MAX_IMPORT_DEPTH} levels deep."
