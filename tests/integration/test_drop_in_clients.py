"""The official ``ollama`` client and the ``openai`` client pointed at ollm-site over HTTP (daphne, as
`make run` serves it), driving long conversations at 2K: the model never gets more than num_ctx,
the goal and the locked decision are in every prompt, every turn is stored once, and the session
shows in the dashboard."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import ollama
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from engine.llm.embedded import MODEL_NAME
from tests.factories import E2E_USERNAME, sampled_options
from tests.support.drop_in import DECISION, GOAL, DropIn
from tests.support.live_server import manage, serve
from tests.support.model_server import ModelServerProcess
from tests.support.timing import scaled

SYSTEM = "You are a travel planner. Answer in one sentence."
TOPICS = ["Tokyo", "Kyoto", "Osaka", "Hiroshima", "Nara", "Sapporo", "Fukuoka", "Nagoya", "Kanazawa", "Nikko"]
NUM_CTX = 2048
# The 2K selection's num_ctx on the site of the long conversations (1,700 unsqueezed): a smaller
# window fills in fewer turns, so the conversation outgrows it twice in TURNS turns, not forty.
SENT_NUM_CTX = 800
TURNS = 18
# Sends the conversation so far; returns the reply. ``stream``: as a stream of chunks.
Send = Callable[[list[dict[str, str]], bool], str]


@pytest.fixture(scope="module")
def squeezed_site(tmp_path_factory: pytest.TempPathFactory, model_server: ModelServerProcess) -> Iterator[DropIn]:
    """The site over HTTP with the embedded model's 2K selection squeezed to ``SENT_NUM_CTX`` tokens."""
    work = tmp_path_factory.mktemp("drop-in-squeezed")
    env = {"OLLM_MODEL_CONTEXT_OVERRIDES": json.dumps({MODEL_NAME: {str(NUM_CTX): SENT_NUM_CTX}})}
    with serve(work, model_server, with_user=True, env=env) as url:
        token = manage(work, model_server, "create_api_token", E2E_USERNAME, "--name", "long conversations").strip()
        yield DropIn(url, token)


def question(turn: int) -> str:
    return f"Turn {turn}: what should I see in {TOPICS[turn % len(TOPICS)]}, and for how long?"


def ollama_send(drop_in: DropIn) -> Send:
    client = ollama.Client(
        host=f"{drop_in.url}/ollama", headers={"Authorization": f"Bearer {drop_in.token}"}, timeout=scaled(600)
    )

    def send(messages: list[dict[str, str]], stream: bool) -> str:
        options = {"num_ctx": NUM_CTX}
        if not stream:
            return str(client.chat(model=MODEL_NAME, messages=messages, options=options, stream=False).message.content)
        chunks = list(client.chat(model=MODEL_NAME, messages=messages, options=options, stream=True))
        assert chunks[-1].done
        assert chunks[-1].eval_count
        return "".join(str(chunk.message.content) for chunk in chunks)

    return send


def openai_send(drop_in: DropIn) -> Send:
    client = openai.OpenAI(base_url=f"{drop_in.url}/v1", api_key=drop_in.token, timeout=scaled(600), max_retries=0)

    def send(history: list[dict[str, str]], stream: bool) -> str:
        messages = cast("list[ChatCompletionMessageParam]", history)
        if not stream:
            completion = client.chat.completions.create(
                model=MODEL_NAME,
                messages=messages,
                extra_body={"num_ctx": NUM_CTX},
            )
            assert completion.usage is not None
            assert completion.usage.completion_tokens > 0
            return str(completion.choices[0].message.content)
        chunks = list(
            client.chat.completions.create(
                model=MODEL_NAME,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"num_ctx": NUM_CTX},
            )
        )
        assert chunks[-1].usage is not None
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    return send


def talk(send: Send, turns: int, *, first: int = 0, after_first: Callable[[], None] | None = None) -> list[str]:
    """``turns`` turns, streaming every other one, the client keeping the whole history as clients do;
    the conversation as the client holds it at the end (contents, system prompt first)."""
    messages = [{"role": "system", "content": SYSTEM}]
    for turn in range(first, first + turns):
        messages.append({"role": "user", "content": question(turn)})
        messages.append({"role": "assistant", "content": send(messages, turn % 2 == 1)})
        if turn == first and after_first is not None:
            after_first()
    return [m["content"] for m in messages]


def the_new_session(drop_in: DropIn, known: set[str], client_prefix: str) -> dict[str, Any]:
    new = [s for s in drop_in.sessions() if s["id"] not in known]
    assert len(new) == 1, new
    assert new[0]["client"].startswith(client_prefix)
    return new[0]


def assert_long_conversation_kept(
    drop_in: DropIn, model_server: ModelServerProcess, session: dict[str, Any], held: list[str]
) -> None:
    # Every turn stored once, in order, as the client holds it.
    stored = drop_in.history(session["id"])
    assert [m["role"] for m in stored] == ["user", "assistant"] * TURNS
    assert [m["content"].strip() for m in stored] == [text.strip() for text in held[1:]]
    detail = drop_in.api.get(f"/api/sessions/{session['id']}").json()
    assert detail["max_tokens"] == SENT_NUM_CTX
    assert detail["compression_count"] >= 2  # it outgrew its window more than once: the context was managed
    # Every reply's prompt was the managed one: num_ctx of the session, the goal and decision pinned
    # (from the turn after they were set), and what the server evaluated fits num_ctx with the reply.
    replies = [
        r
        for r in model_server.behaviour.requests
        if r["path"] == "/api/chat" and r["messages"][0]["role"] == "system" and SYSTEM in r["messages"][0]["content"]
    ]
    assert len(replies) == TURNS
    for request in replies:
        assert request["options"]["num_ctx"] == SENT_NUM_CTX
    for request in replies[1:]:
        assert f"ACTIVE GOAL: {GOAL}" in request["messages"][0]["content"]
        assert f"🔒 {DECISION}" in request["messages"][0]["content"]
    # The client's own history grew far past num_ctx; what the model was sent never did.
    assert len(replies[-1]["messages"]) < len(held)
    served = model_server.behaviour.served
    assert len(served) >= TURNS
    for generation in served:
        assert generation.prompt_tokens + generation.completion_tokens <= SENT_NUM_CTX
    # And the session shows in the dashboard, marked with its client.
    listing = drop_in.dashboard("/")
    assert session["title"] in listing
    assert f"via {session['client'][:20]}" in listing
    assert f"via {session['client']}" in drop_in.dashboard(f"/sessions/{session['id']}/")


@pytest.mark.long_model
@pytest.mark.parametrize(
    ("make_send", "client_prefix"), [(ollama_send, "ollama-python/"), (openai_send, "OpenAI/Python")]
)
def test_a_client_keeps_a_long_conversation_inside_2k(squeezed_site, model_server, make_send, client_prefix):
    drop_in = squeezed_site
    known = {s["id"] for s in drop_in.sessions()}
    model_server.behaviour.requests.clear()
    session_id: list[str] = []

    def pin() -> None:
        session_id.append(the_new_session(drop_in, known, client_prefix)["id"])
        drop_in.pin(session_id[0])

    held = talk(make_send(drop_in), TURNS, after_first=pin)
    session = the_new_session(drop_in, known, client_prefix)
    assert session["id"] == session_id[0]
    assert_long_conversation_kept(drop_in, model_server, session, held)


def test_two_clients_at_once_keep_two_sessions(drop_in):
    known = {s["id"] for s in drop_in.sessions()}
    held: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def run(name: str, send: Send, first: int) -> None:
        try:
            held[name] = talk(send, 3, first=first)
        except BaseException as exc:  # told to the test below
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=("ollama", ollama_send(drop_in), 0)),
        threading.Thread(target=run, args=("openai", openai_send(drop_in), 5)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scaled(600))
    assert not errors, errors
    new = [s for s in drop_in.sessions() if s["id"] not in known]
    assert len(new) == 2
    for session in new:
        name = "ollama" if session["client"].startswith("ollama") else "openai"
        stored = [m["content"].strip() for m in drop_in.history(session["id"])]
        assert stored == [text.strip() for text in held[name][1:]]


def test_a_stream_refused_before_it_starts_answers_in_the_clients_error(drop_in):
    refusing = ollama.Client(host=f"{drop_in.url}/ollama", headers={"Authorization": "Bearer wrong"})
    with pytest.raises(ollama.ResponseError) as refused:
        list(refusing.chat(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], stream=True))
    assert refused.value.status_code == 401
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=f"{drop_in.url}/v1", api_key=drop_in.token, max_retries=0).chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "Hi"}], stream=True
        )


def test_each_clients_sampling_reaches_the_model_for_its_request_only(drop_in, model_server):
    """Streamed replies too: the ollama client's ``options`` and the openai client's temperature, top_p and
    seed are what the model samples that reply with; the next request has the session's again (the test
    server's: greedy)."""
    ollama_client = ollama.Client(host=f"{drop_in.url}/ollama", headers={"Authorization": f"Bearer {drop_in.token}"})
    asked = {"temperature": 0.9, "top_k": 7, "top_p": 0.6, "repeat_penalty": 1.2, "repeat_last_n": 32, "seed": 11}
    model_server.behaviour.requests.clear()
    history = [{"role": "user", "content": "Name a colour."}]
    chunks = list(ollama_client.chat(model=MODEL_NAME, messages=history, stream=True, options=asked))
    history += [
        {"role": "assistant", "content": "".join(str(chunk.message.content) for chunk in chunks)},
        {"role": "user", "content": "Another one."},
    ]
    list(ollama_client.chat(model=MODEL_NAME, messages=history, stream=True))
    openai_client = openai.OpenAI(base_url=f"{drop_in.url}/v1", api_key=drop_in.token, max_retries=0)
    stream = openai_client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": "Name a fruit."}],
        stream=True,
        temperature=1.1,
        top_p=0.7,
        seed=5,
        frequency_penalty=0.5,
    )
    list(stream)
    assert sampled_options(model_server) == [asked, {"temperature": 0.0}, {"temperature": 1.1, "top_p": 0.7, "seed": 5}]
