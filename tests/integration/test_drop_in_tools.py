"""Tool calls through the drop-in APIs, with the real ``openai`` and ``ollama`` clients over HTTP: the site's
Ollama host is the tests' model server, which reports the "tools" capability for ``SERVED_MODEL`` and answers a
canned ``<tool_call>`` reply with Ollama's ``message.tool_calls``. Each conversation is one session holding the
call with its result once, and the next prompt the backend sees carries both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import ollama
import openai
import pytest

from engine.llm.embedded import MODEL_NAME
from tests.factories import E2E_USERNAME
from tests.support.drop_in import DropIn
from tests.support.live_server import manage, serve
from tests.support.model_server import SERVED_MODEL, ModelServerProcess
from tests.support.timing import scaled

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
ANSWER = "It is sunny in Paris."
RESULT = "sunny, 24 C"


@pytest.fixture(scope="module")
def tool_site(tmp_path_factory: pytest.TempPathFactory, model_server: ModelServerProcess) -> Iterator[DropIn]:
    """The site with the bundled model and an Ollama host (the model server, serving ``SERVED_MODEL``)."""
    work = tmp_path_factory.mktemp("drop-in-tools")
    env = {"OLLM_LLM_BACKEND": "auto", "OLLAMA_HOST": model_server.url}
    with serve(work, model_server, with_user=True, env=env) as url:
        token = manage(work, model_server, "create_api_token", E2E_USERNAME, "--name", "tools").strip()
        yield DropIn(url, token)


@pytest.fixture
def tools_on(model_server: ModelServerProcess) -> Iterator[ModelServerProcess]:
    """``SERVED_MODEL`` takes tools; it calls get_weather, then answers from the result."""
    model_server.reset()
    model_server.behaviour.tool_capable_models = [SERVED_MODEL]
    model_server.behaviour.canned_replies = [CALL, ANSWER]
    model_server.behaviour.requests.clear()
    yield model_server
    model_server.reset()


def started_session(drop_in: DropIn, known: set[str]) -> str:
    [session] = [s["id"] for s in drop_in.sessions() if s["id"] not in known]
    return str(session)


def last_chat(server: ModelServerProcess) -> dict[str, Any]:
    return [r for r in server.behaviour.requests if r["path"] == "/api/chat"][-1]


def assert_stored_once(drop_in: DropIn, session_id: str, *, then: list[tuple[str, str]]) -> None:
    """The question, the call with its result as one tool message, the answer, then ``then``."""
    history = [(m["role"], m["content"].strip(), m["tool_name"]) for m in drop_in.history(session_id)]
    expected = [
        ("user", "What is the weather in Paris?", ""),
        ("tool", RESULT, "get_weather"),
        ("assistant", ANSWER, ""),
        *[(role, content, "") for role, content in then],
    ]
    assert history[: len(expected)] == expected
    assert len(history) in (len(expected), len(expected) + 1)  # with the last reply, when there is one
    # The REST API lists the call with what it was called with.
    [call] = [m for m in drop_in.history(session_id) if m["role"] == "tool"]
    assert (call["tool_args"], call["tool_result"]) == ({"city": "Paris"}, None)


def assert_prompt_holds_the_call_and_its_result(request: dict[str, Any]) -> None:
    messages = request["messages"]
    calls = [m for m in messages if m.get("tool_calls")]
    assert [c["tool_calls"] for c in calls] == [[{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]]
    results = [m for m in messages if m["role"] == "tool"]
    assert [(r["content"], r["tool_name"]) for r in results] == [(RESULT, "get_weather")]
    assert messages.index(calls[0]) + 1 == messages.index(results[0])
    assert request["tools"] == [WEATHER]


def test_a_tool_round_trip_through_the_openai_client_is_one_session(tool_site, tools_on):
    known = {s["id"] for s in tool_site.sessions()}
    chat = openai.OpenAI(base_url=f"{tool_site.url}/v1", api_key=tool_site.token, timeout=scaled(600), max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    chunks = list(chat.chat.completions.create(model=SERVED_MODEL, messages=messages, tools=[WEATHER], stream=True))
    assert last_chat(tools_on)["tools"] == [WEATHER]
    deltas = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or ()]
    [delta] = deltas
    function = delta.function
    assert function is not None
    assert function.arguments is not None
    assert (delta.index, delta.type, function.name) == (0, "function", "get_weather")
    assert json.loads(function.arguments) == {"city": "Paris"}
    assert delta.id
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": delta.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": delta.id, "content": RESULT},
    ]
    final = chat.chat.completions.create(model=SERVED_MODEL, messages=messages, tools=[WEATHER])
    assert (final.choices[0].message.content, final.choices[0].finish_reason) == (ANSWER, "stop")
    assert not final.choices[0].message.tool_calls
    assert_prompt_holds_the_call_and_its_result(last_chat(tools_on))
    session_id = started_session(tool_site, known)
    # The next message continues the same session, whose prompt still holds the call and its result.
    messages += [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": "And tomorrow?"}]
    chat.chat.completions.create(model=SERVED_MODEL, messages=messages, tools=[WEATHER])
    assert started_session(tool_site, known) == session_id
    assert_prompt_holds_the_call_and_its_result(last_chat(tools_on))
    assert_stored_once(tool_site, session_id, then=[("user", "And tomorrow?")])

    # The session file and the archive keep the call, its arguments and its result.
    exported = tool_site.api.get(f"/api/sessions/{session_id}/export").json()
    [call] = exported["toolCalls"]
    assert (call["id"], call["name"], call["args"], call["result"]["llmContent"]) == (
        delta.id,
        "get_weather",
        {"city": "Paris"},
        RESULT,
    )
    copy = tool_site.api.post("/api/sessions/import", params={"on_existing": "copy"}, json=exported)
    assert copy.status_code == 201, copy.text
    assert tool_site.api.get(f"/api/sessions/{copy.json()['id']}/export").json()["toolCalls"] == [call]
    archive = tool_site.api.get(f"/api/sessions/{session_id}/archive").json()
    restored = tool_site.api.post("/api/sessions/import", params={"on_existing": "copy"}, json=archive)
    assert restored.status_code == 201, restored.text
    assert tool_site.api.get(f"/api/sessions/{restored.json()['id']}/export").json()["toolCalls"] == [call]


def test_a_tool_round_trip_through_the_ollama_client_is_one_session(tool_site, tools_on):
    known = {s["id"] for s in tool_site.sessions()}
    local = ollama.Client(host=f"{tool_site.url}/ollama", headers={"Authorization": f"Bearer {tool_site.token}"})
    history: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = local.chat(model=SERVED_MODEL, messages=history, tools=[WEATHER], stream=False)
    [call] = called.message.tool_calls or []
    assert (call.function.name, dict(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert not called.message.content
    history += [called.message, {"role": "tool", "content": RESULT, "tool_name": "get_weather"}]
    parts = list(local.chat(model=SERVED_MODEL, messages=history, tools=[WEATHER], stream=True))
    assert "".join(p.message.content or "" for p in parts) == ANSWER
    assert parts[-1].done
    assert_prompt_holds_the_call_and_its_result(last_chat(tools_on))
    session_id = started_session(tool_site, known)
    history += [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": "And tomorrow?"}]
    local.chat(model=SERVED_MODEL, messages=history, tools=[WEATHER], stream=False)
    assert started_session(tool_site, known) == session_id
    assert_prompt_holds_the_call_and_its_result(last_chat(tools_on))
    assert_stored_once(tool_site, session_id, then=[("user", "And tomorrow?")])


def test_a_streamed_ollama_tool_call_comes_in_a_chunk_before_the_last(tool_site, tools_on):
    local = ollama.Client(host=f"{tool_site.url}/ollama", headers={"Authorization": f"Bearer {tool_site.token}"})
    parts = list(
        local.chat(
            model=SERVED_MODEL,
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER],
            stream=True,
        )
    )
    calls = [
        (i, c.function.name, dict(c.function.arguments))
        for i, p in enumerate(parts)
        for c in p.message.tool_calls or ()
    ]
    assert calls == [(len(parts) - 2, "get_weather", {"city": "Paris"})]
    assert parts[-1].done


def test_only_a_model_with_the_tools_capability_is_given_tools(tool_site, tools_on):
    api = tool_site.api
    shown = {
        name: api.post("/ollama/api/show", json={"model": name}).json()["capabilities"]
        for name in (MODEL_NAME, SERVED_MODEL)
    }
    assert shown == {MODEL_NAME: ["completion"], SERVED_MODEL: ["completion", "tools"]}
    tags = {m["name"]: m["capabilities"] for m in api.get("/ollama/api/tags").json()["models"]}
    assert (tags[MODEL_NAME], tags[SERVED_MODEL]) == (["completion"], ["completion", "tools"])
    chat = openai.OpenAI(base_url=f"{tool_site.url}/v1", api_key=tool_site.token, timeout=scaled(600), max_retries=0)
    question: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    with pytest.raises(openai.BadRequestError) as refused:
        chat.chat.completions.create(model=MODEL_NAME, messages=question, tools=[WEATHER], tool_choice="required")
    assert refused.value.code == "tool_choice_not_supported"
    assert 'no "tools" capability' in str(refused.value)
    # The bundled model answers as text, and the request it sent has no tools.
    tools_on.behaviour.canned_reply = CALL
    tools_on.behaviour.canned_replies = None
    text = chat.chat.completions.create(model=MODEL_NAME, messages=question, tools=[WEATHER])
    assert (text.choices[0].message.content, text.choices[0].finish_reason) == (CALL, "stop")
    assert not last_chat(tools_on).get("tools")
    # A model that takes tools may be asked to call one.
    required = chat.chat.completions.create(
        model=SERVED_MODEL, messages=question, tools=[WEATHER], tool_choice="required"
    )
    assert required.choices[0].finish_reason == "tool_calls"


def weather_called_and_answered(tool_site: Any) -> tuple[openai.OpenAI, list[Any], Any]:
    """An ``openai`` client of the site, the messages of a question whose reply called the weather tool
    with that call's result after it (the next request's), and the call."""
    chat = openai.OpenAI(base_url=f"{tool_site.url}/v1", api_key=tool_site.token, timeout=scaled(600), max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    [call] = (
        chat.chat.completions.create(model=SERVED_MODEL, messages=messages, tools=[WEATHER])
        .choices[0]
        .message.tool_calls
        or []
    )
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": RESULT},
    ]
    return chat, messages, call


def test_a_tool_result_whose_answer_failed_is_answered_when_the_client_repeats_it(tool_site, tools_on):
    known = {s["id"] for s in tool_site.sessions()}
    chat, messages, call = weather_called_and_answered(tool_site)
    assert call.type == "function"
    tools_on.behaviour.fail_status = 500
    with pytest.raises(openai.APIStatusError):
        chat.chat.completions.create(model=SERVED_MODEL, messages=messages, tools=[WEATHER])
    tools_on.behaviour.fail_status = None
    final = chat.chat.completions.create(model=SERVED_MODEL, messages=messages, tools=[WEATHER])
    assert final.choices[0].message.content == ANSWER
    session_id = started_session(tool_site, known)
    assert_stored_once(tool_site, session_id, then=[])


def test_a_conversations_later_turns_do_not_ask_the_model_for_its_capabilities_again(tool_site, tools_on):
    chat, messages, _ = weather_called_and_answered(tool_site)
    tools_on.behaviour.requests.clear()
    final = chat.chat.completions.create(model=SERVED_MODEL, messages=messages, tools=[WEATHER])
    assert final.choices[0].message.content == ANSWER
    paths = [r["path"] for r in tools_on.behaviour.requests]
    assert "/api/chat" in paths
    assert "/api/show" not in paths, "the capability answered a moment ago is kept"
