"""Open WebUI's background tasks (a chat's title, tags, follow-up questions), sent as it sends them
(tests/data/open_webui_tasks.json) through the real ``openai`` and ``ollama`` clients over HTTP: each is
answered in the API's shape, streamed or not, recorded for review, and starts no session; the chat
around them stays one session; a token's switch turns them back into sessions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import cast

import ollama
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from engine.llm.embedded import MODEL_NAME
from tests.support.drop_in import DropIn
from tests.support.model_server import ModelServerProcess
from tests.support.timing import scaled

RECORDED = json.loads((Path(__file__).parent.parent / "data" / "open_webui_tasks.json").read_text(encoding="utf-8"))
# What Open WebUI sends with every request when it forwards its user's info (ENABLE_FORWARD_USER_INFO_HEADERS).
OPEN_WEBUI_HEADERS = {
    "User-Agent": "Python/3.11 aiohttp/3.12.15",
    "X-OpenWebUI-User-Name": "Alice",
    "X-OpenWebUI-User-Id": "8d1c7c51-5a6b-4a1e-9d0e-0c4d1f1b2a33",
    "X-OpenWebUI-User-Email": "alice@example.org",
    "X-OpenWebUI-User-Role": "user",
    "X-OpenWebUI-Chat-Id": "3f2a9e0c-7b1d-4c55-8a61-2d9b0e4f7a10",
}

# A task's answer follows the request's cap (Open WebUI sends one): kept small, so the tasks are quick.
TASK_CAP = 24


def task(name: str) -> list[dict[str, str]]:
    recorded = next(t for t in RECORDED["tasks"] if t["name"] == name)
    return list(recorded["body"]["messages"])


def openai_client(drop_in: DropIn) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{drop_in.url}/v1",
        api_key=drop_in.token,
        timeout=scaled(600),
        max_retries=0,
        default_headers=OPEN_WEBUI_HEADERS,
    )


def ollama_client(drop_in: DropIn) -> ollama.Client:
    headers = {"Authorization": f"Bearer {drop_in.token}", **OPEN_WEBUI_HEADERS}
    return ollama.Client(host=f"{drop_in.url}/ollama", headers=headers, timeout=scaled(600))


def openai_ask(
    drop_in: DropIn, history: list[dict[str, str]], *, stream: bool, cap: int | None = TASK_CAP
) -> tuple[str, str | None]:
    """The answer (of at most ``cap`` tokens, sent as Open WebUI sends it: max_tokens), and the session
    the response names (None: no header)."""
    client = openai_client(drop_in)
    messages = cast("list[ChatCompletionMessageParam]", history)
    if not stream:
        raw = client.chat.completions.with_raw_response.create(model=MODEL_NAME, messages=messages, max_tokens=cap)
        completion = raw.parse()
        assert completion.object == "chat.completion"
        assert completion.usage is not None
        assert 0 < completion.usage.completion_tokens <= (cap or completion.usage.completion_tokens)
        return str(completion.choices[0].message.content), raw.headers.get("X-OLLM-Session")
    with client.chat.completions.with_streaming_response.create(
        model=MODEL_NAME, messages=messages, stream=True, stream_options={"include_usage": True}, max_tokens=cap
    ) as response:
        session = response.headers.get("X-OLLM-Session")
        chunks = list(response.parse())
    usage = chunks[-1].usage
    assert usage is not None
    assert 0 < usage.completion_tokens <= (cap or usage.completion_tokens)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), session


def ollama_ask(drop_in: DropIn, messages: list[dict[str, str]], *, stream: bool) -> str:
    """The answer, of at most TASK_CAP tokens (``num_predict``): a task's and a turn's follow it (issue 49)."""
    client = ollama_client(drop_in)
    options = {"num_predict": TASK_CAP}
    if not stream:
        reply = client.chat(model=MODEL_NAME, messages=messages, stream=False, options=options)
        assert reply.done
        assert 0 < (reply.eval_count or 0) <= TASK_CAP
        return str(reply.message.content)
    chunks = list(client.chat(model=MODEL_NAME, messages=messages, stream=True, options=options))
    assert chunks[-1].done
    assert 0 < (chunks[-1].eval_count or 0) <= TASK_CAP
    return "".join(str(c.message.content) for c in chunks)


def session_ids(drop_in: DropIn) -> set[str]:
    return {s["id"] for s in drop_in.sessions()}


def answered_apart(drop_in: DropIn) -> int:
    found = re.search(r"(\d+) answered apart", drop_in.dashboard("/account/tokens/"))
    assert found is not None
    return int(found.group(1))


def test_open_webuis_tasks_are_answered_apart_in_each_apis_shape_and_start_no_session(
    drop_in, model_server: ModelServerProcess
):
    known = session_ids(drop_in)
    before = answered_apart(drop_in)
    asked = 0
    for name in ("title", "tags", "follow_ups"):
        for stream in (False, True):
            answer, session = openai_ask(drop_in, task(name), stream=stream)
            assert answer.strip()
            assert session is None
            assert ollama_ask(drop_in, task(name), stream=stream).strip()
            asked += 2
    assert session_ids(drop_in) == known
    assert answered_apart(drop_in) == before + asked
    # The model was sent the task as the client wrote it, not a session's managed prompt.
    sent = [r for r in model_server.behaviour.requests if r["path"] == "/api/chat"]
    title = task("title")[0]["content"]
    assert sum(1 for r in sent if [m.get("content") for m in r["messages"]] == [title]) == 4
    # Each is on the tokens page, with its client named and its kind.
    page = drop_in.dashboard("/account/tokens/")
    assert "<td>Open WebUI</td>" in page
    assert "<td>follow_ups</td>" in page
    assert "<td>tags</td>" in page
    assert "<td>title</td>" in page


def test_a_chat_with_its_tasks_between_its_turns_stays_one_session_named_by_its_client(drop_in):
    known = session_ids(drop_in)
    chat = [{"role": "user", "content": "What should I see in Kyoto in two days?"}]
    answer, first = openai_ask(drop_in, chat, stream=True, cap=None)
    chat.append({"role": "assistant", "content": answer})
    # What Open WebUI sends after a first reply: the title, then the tags, then the follow-ups.
    for name in ("title", "tags", "follow_ups"):
        assert openai_ask(drop_in, task(name), stream=False)[1] is None
    chat.append({"role": "user", "content": "And where should I eat near Gion?"})
    answer, second = openai_ask(drop_in, chat, stream=False, cap=None)
    assert first is not None
    assert second == first
    new = [s for s in drop_in.sessions() if s["id"] not in known]
    assert [s["id"] for s in new] == [first]
    assert new[0]["client"] == "Open WebUI"
    assert [m["role"] for m in drop_in.history(first)] == ["user", "assistant", "user", "assistant"]


def test_a_tokens_switch_makes_its_clients_tasks_sessions_again(drop_in):
    page = drop_in.dashboard("/account/tokens/")
    action = re.search(r'action="(/account/tokens/\d+/tasks/)"', page)
    assert action is not None
    turned = drop_in.dashboard_post("/account/tokens/", action.group(1), {"apart": "off"})
    assert turned.status_code == 200
    assert "(off: they are sessions)" in turned.text
    try:
        known = session_ids(drop_in)
        before = answered_apart(drop_in)
        answer, session = openai_ask(drop_in, task("title"), stream=False, cap=None)
        assert answer.strip()
        assert session is not None
        assert ollama_ask(drop_in, task("tags"), stream=True).strip()
        new = [s for s in drop_in.sessions() if s["id"] not in known]
        assert len(new) == 2
        assert all(s["title"].startswith("### Task:") for s in new)
        assert answered_apart(drop_in) == before
    finally:
        back = drop_in.dashboard_post("/account/tokens/", action.group(1), {"apart": "on"})
        assert back.status_code == 200
        assert "Make them sessions" in back.text


def test_a_task_for_a_model_not_served_is_refused_as_a_turn_is(drop_in):
    known = session_ids(drop_in)
    with pytest.raises(openai.NotFoundError) as refused:
        openai_client(drop_in).chat.completions.create(
            model="no-such-model", messages=cast("list[ChatCompletionMessageParam]", task("title"))
        )
    assert refused.value.code == "model_not_found"
    assert session_ids(drop_in) == known
