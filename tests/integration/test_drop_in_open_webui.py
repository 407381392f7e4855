"""Conversations shaped as Open WebUI sends them, through the real ``openai`` and ``ollama`` clients over
HTTP: its builtin tools on every chat (no tool_choice), Stop mid-stream then the next message, and
Continue response. Each conversation is one session, every message in it once."""

from __future__ import annotations

from typing import Any

import ollama
import openai
import pytest

from engine.llm.embedded import MODEL_NAME
from tests.support.drop_in import DropIn
from tests.support.model_server import ModelServerProcess
from tests.support.timing import scaled, wait_until


def tool(name: str, description: str, **parameters: str) -> dict[str, Any]:
    properties = {key: {"type": kind} for key, kind in parameters.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(parameters)},
        },
    }


# Some of Open WebUI's builtin tools, as its native function calling sends them with every chat.
OPEN_WEBUI_TOOLS: list[Any] = [
    tool("get_current_timestamp", "Get the current Unix timestamp in seconds."),
    tool("search_memories", "Search the user's stored memories.", query="string"),
    tool("add_memory", "Store a memory about the user.", content="string"),
    tool("search_notes", "Search the user's notes by title and content.", query="string", count="integer"),
    tool("query_knowledge_files", "Search knowledge base files.", query="string"),
]
STORY = "The lighthouse keeper counted ships every night, and one night a ship with no lights sailed past the rocks."


def openai_client(drop_in: DropIn) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{drop_in.url}/v1", api_key=drop_in.token, timeout=scaled(600), max_retries=0)


def new_sessions(drop_in: DropIn, known: set[str]) -> list[dict[str, Any]]:
    return [s for s in drop_in.sessions() if s["id"] not in known]


def in_context(drop_in: DropIn, session_id: str) -> list[tuple[str, str]]:
    return [(m["role"], m["content"].strip()) for m in drop_in.history(session_id) if m["in_active_context"]]


def held(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"].strip()) for m in messages if m["role"] != "system"]


def test_open_webuis_tools_are_answered_as_text_on_both_apis_in_one_session_each(drop_in):
    known = {s["id"] for s in drop_in.sessions()}
    chat = openai_client(drop_in)
    messages: list[Any] = [{"role": "user", "content": "Name a colour."}]
    for follow_up in ("Name another.", "And a third."):
        stream = chat.chat.completions.create(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS, stream=True)
        chunks = list(stream)
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        reply = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert reply.strip()
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": follow_up}]
    chat.chat.completions.create(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS)
    local = ollama.Client(host=f"{drop_in.url}/ollama", headers={"Authorization": f"Bearer {drop_in.token}"})
    history: list[Any] = [{"role": "user", "content": "Name a fruit."}]
    for follow_up in ("Name another.",):
        answer = local.chat(model=MODEL_NAME, messages=history, tools=OPEN_WEBUI_TOOLS, stream=False)
        assert not answer.message.tool_calls
        history += [{"role": "assistant", "content": answer.message.content}, {"role": "user", "content": follow_up}]
    local.chat(model=MODEL_NAME, messages=history, tools=OPEN_WEBUI_TOOLS, stream=False)
    sessions = new_sessions(drop_in, known)
    assert len(sessions) == 2
    by_first = {drop_in.history(s["id"])[0]["content"]: s["id"] for s in sessions}
    assert in_context(drop_in, by_first["Name a colour."])[:-1] == held(messages)
    assert in_context(drop_in, by_first["Name a fruit."])[:-1] == held(history)
    assert len(drop_in.history(by_first["Name a colour."])) == 6
    with pytest.raises(openai.BadRequestError) as refused:
        chat.chat.completions.create(
            model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS, tool_choice="required"
        )
    assert refused.value.code == "tool_choice_not_supported"
    assert len(drop_in.history(by_first["Name a colour."])) == 6  # nothing stored


def test_stop_mid_stream_then_the_next_message_continues_the_session(drop_in, model_server: ModelServerProcess):
    known = {s["id"] for s in drop_in.sessions()}
    chat = openai_client(drop_in)
    model_server.behaviour.canned_reply = STORY
    model_server.behaviour.chunk_delay_seconds = 0.2
    try:
        messages: list[Any] = [{"role": "user", "content": "Tell me a story."}]
        stream = chat.chat.completions.create(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS, stream=True)
        read: list[str] = []
        for chunk in stream:
            read.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
            if len([r for r in read if r]) == 5:
                break
        stream.close()  # Stop
        # As a person types the next message: once the server has let the stopped reply go.
        [session] = wait_until(lambda: new_sessions(drop_in, known), timeout=30, what="the session")
        wait_until(
            lambda: any(m["done_reason"] == "cancelled" for m in drop_in.history(session["id"])),
            timeout=60,
            what="the stopped reply stored",
        )
    finally:
        model_server.reset()
    # The client shows what it had rendered: the last chunk it read was still on its way.
    kept = "".join(read[:-1])
    assert kept.strip()
    assert STORY.startswith(kept.strip())
    messages += [{"role": "assistant", "content": kept}, {"role": "user", "content": "Go on, briefly."}]
    reply = chat.chat.completions.create(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS)
    messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    messages.append({"role": "user", "content": "Thanks."})
    chat.chat.completions.create(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS)
    [session] = new_sessions(drop_in, known)
    assert in_context(drop_in, session["id"])[:-1] == held(messages)
    everything = drop_in.history(session["id"])
    stopped = [m for m in everything if m["role"] == "assistant" and m["done_reason"] == "cancelled"]
    # The whole stored stop stays in the history, out of the context; the part the client kept is in it.
    assert [m["in_active_context"] for m in stopped] == [False, True]
    assert len(stopped[0]["content"]) > len(stopped[1]["content"])
    assert stopped[0]["content"].startswith(stopped[1]["content"])
    assert [m["content"] for m in everything if m["role"] == "user"] == [
        "Tell me a story.",
        "Go on, briefly.",
        "Thanks.",
    ]


def test_continue_response_continues_the_last_reply_in_its_session(drop_in, model_server: ModelServerProcess):
    known = {s["id"] for s in drop_in.sessions()}
    local = ollama.Client(host=f"{drop_in.url}/ollama", headers={"Authorization": f"Bearer {drop_in.token}"})
    model_server.behaviour.canned_replies = ["The lighthouse keeper", " counted ships every night."]
    try:
        messages: list[Any] = [{"role": "user", "content": "Tell me a story."}]
        first = local.chat(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS, stream=False)
        messages.append({"role": "assistant", "content": first.message.content})
        # Continue response: the history ends with the reply, and what comes back is appended to it.
        more = "".join(
            str(c.message.content)
            for c in local.chat(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS, stream=True)
        )
        # The model was sent the reply to continue, as the prompt's last message.
        continued = [r for r in model_server.behaviour.requests if r["path"] == "/api/chat"][-1]
    finally:
        model_server.reset()
    assert more.strip() == "counted ships every night."
    messages[-1]["content"] += more
    assert continued["messages"][-1] == {"role": "assistant", "content": "The lighthouse keeper"}
    messages.append({"role": "user", "content": "Who was on the ship?"})
    local.chat(model=MODEL_NAME, messages=messages, stream=False)
    [session] = new_sessions(drop_in, known)
    assert in_context(drop_in, session["id"])[:-1] == held(messages)
    everything = drop_in.history(session["id"])
    assert [(m["role"], m["in_active_context"]) for m in everything] == [
        ("user", True), ("assistant", False), ("assistant", True), ("user", True), ("assistant", True),
    ]  # fmt: skip


def test_a_history_with_tool_calls_is_stored_as_the_session_file_keeps_them(drop_in):
    """A conversation whose tools ran on another model (the client kept the calls and their results)
    continues here in one session: each call with its result is one tool entry, in the export's toolCalls."""
    known = {s["id"] for s in drop_in.sessions()}
    chat = openai_client(drop_in)
    call = {"id": "call_7", "type": "function", "function": {"name": "search_notes", "arguments": '{"query": "trip"}'}}
    messages: list[Any] = [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "What did I note about the trip?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_7", "content": "Trip: Kyoto in April, by train."},
        {"role": "assistant", "content": "You noted Kyoto in April, by train."},
        {"role": "user", "content": "Which month?"},
    ]
    reply = chat.chat.completions.create(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS)
    messages += [
        {"role": "assistant", "content": reply.choices[0].message.content},
        {"role": "user", "content": "Thanks."},
    ]
    chat.chat.completions.create(model=MODEL_NAME, messages=messages, tools=OPEN_WEBUI_TOOLS)
    [session] = new_sessions(drop_in, known)
    stored = drop_in.history(session["id"])
    assert [(m["role"], m["tool_call_id"], m["tool_name"]) for m in stored[:3]] == [
        ("user", "", ""), ("tool", "call_7", "search_notes"), ("assistant", "", ""),
    ]  # fmt: skip
    assert [m["role"] for m in stored[3:]] == ["user", "assistant", "user", "assistant"]
    exported = drop_in.api.get(f"/api/sessions/{session['id']}/export").json()
    [tool_call] = exported["toolCalls"]
    assert (tool_call["id"], tool_call["name"], tool_call["args"]) == ("call_7", "search_notes", {"query": "trip"})
    assert tool_call["result"]["llmContent"] == "Trip: Kyoto in April, by train."
