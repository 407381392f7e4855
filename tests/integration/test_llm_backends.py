"""What only one backend does: Ollama's failure modes over real HTTP, the embedded model's exact counts."""

from __future__ import annotations

import socket

import httpx
import pytest

from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from engine.llm.embedded import TOKENIZE_BATCH, EmbeddedBackend
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend, parse_parameter_size
from engine.llm.types import (
    BackendUnavailable,
    ChatMessage,
    ChatRequest,
    ContextOverflow,
    LLMRequestError,
    LLMTimeout,
    ModelNotFound,
    Sampling,
    ToolCall,
)
from engine.resources import count_text_tokens
from tests.support.model_server import SERVED_MODEL

HELLO = [ChatMessage("user", "Say hello.")]
LONG = [ChatMessage("user", "Count from 1 to 300, separated by commas.")]


async def test_ollama_receives_num_ctx_and_the_cap_on_every_call(ollama_backend, fake_ollama):
    await ollama_backend.chat(
        ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=1700, max_tokens=5, stop=["\n\n"], sampling=Sampling(seed=1))
    ).collect()
    (request,) = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    # What the sampling leaves unset (temperature here) is the server's default: not sent.
    assert request["options"] == {"num_ctx": 1700, "num_predict": 5, "stop": ["\n\n"], "seed": 1}
    assert request["stream"] is True
    assert request["messages"] == [{"role": "user", "content": "Say hello."}]


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


async def test_ollama_is_given_the_tools_and_the_prompts_tool_calls_and_the_result_carries_the_calls(
    ollama_backend, fake_ollama
):
    fake_ollama.behaviour.tool_capable_models = [SERVED_MODEL]
    fake_ollama.behaviour.canned_reply = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    assert "tools" in (await ollama_backend.model_info(SERVED_MODEL)).capabilities
    assert "tools" not in (await ollama_backend.model_info(EMBEDDED_MODEL)).capabilities
    earlier = [
        ChatMessage("user", "Weather in Paris?"),
        ChatMessage("assistant", "", (ToolCall("get_weather", {"city": "Paris"}, "c1"),)),
        ChatMessage("tool", "sunny", tool_name="get_weather", tool_call_id="c1"),
        ChatMessage("user", "And Oslo?"),
    ]
    request = ChatRequest(earlier, model=SERVED_MODEL, num_ctx=2048, max_tokens=50, tools=[WEATHER])
    for _ in range(2):  # streamed, as every call is, and collected
        stream = ollama_backend.chat(request)
        assert [delta async for delta in stream] == []
        assert stream.result is not None
        assert stream.result.tool_calls == (ToolCall("get_weather", {"city": "Oslo"}),)
    sent = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"][-1]
    assert sent["tools"] == [WEATHER]
    # The ollama client leaves an empty content out.
    assert sent["messages"][1:3] == [
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]
    # Without tools, the same reply is the model's text.
    text = await ollama_backend.chat(ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=2048, max_tokens=50)).collect()
    assert text.text.startswith("<tool_call>")
    assert text.result.tool_calls == ()


async def test_unreachable_server_is_reported_at_the_first_iteration(closed_port_url):
    backend = OllamaBackend(host=closed_port_url)
    stream = backend.chat(ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=2048, max_tokens=5))
    with pytest.raises(BackendUnavailable, match=f"Ollama is not reachable at {closed_port_url}: start it with"):
        await stream.collect()
    with pytest.raises(BackendUnavailable):
        await backend.list_models()
    assert not await backend.health()


async def test_missing_model_tells_how_to_pull_it(ollama_backend):
    with pytest.raises(ModelNotFound, match=r"model llama3.2:3b is not pulled; run `ollama pull llama3.2:3b`"):
        await ollama_backend.chat(ChatRequest(HELLO, model="llama3.2:3b", num_ctx=2048, max_tokens=5)).collect()


async def test_a_stream_dropped_half_way(ollama_backend, fake_ollama):
    fake_ollama.behaviour.drop_after_chunks = 3
    stream = ollama_backend.chat(ChatRequest(LONG, model=SERVED_MODEL, num_ctx=2048, max_tokens=200))
    received: list[str] = []

    async def read_all() -> None:
        async for delta in stream:
            received.append(delta)

    with pytest.raises(LLMRequestError, match="broke off mid-reply"):
        await read_all()
    assert len(received) == 3
    assert stream.result is None


async def test_a_slow_server_times_out(fake_ollama):
    fake_ollama.behaviour.delay_seconds = 1.5
    backend = OllamaBackend(host=fake_ollama.url, timeout=0.3)
    with pytest.raises(LLMTimeout, match="did not answer in time"):
        await backend.chat(ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=2048, max_tokens=5)).collect()


async def test_a_server_error_is_reported_with_its_status(ollama_backend, fake_ollama):
    fake_ollama.behaviour.fail_status = 500
    with pytest.raises(LLMRequestError, match=r"Ollama refused the request \(500\): the test server was told to fail"):
        await ollama_backend.chat(ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=2048, max_tokens=5)).collect()


async def test_ollama_has_no_exact_counter(ollama_backend):
    assert await ollama_backend.count_tokens("hello", SERVED_MODEL) is None


@pytest.mark.parametrize(
    ("text", "size"), [("3.2B", 3.2), ("135M", 0.135), ("70b", 70.0), ("1T", 1000.0), ("", None), ("big", None)]
)
def test_parameter_size_strings(text, size):
    assert parse_parameter_size(text) == (pytest.approx(size) if size else None)


async def test_embedded_counts_are_exact_and_differ_from_tiktoken(embedded_backend):
    text = "Context compression keeps long conversations going: src/auth/login.ts, 13,600 tokens."
    exact = await embedded_backend.count_tokens(text, EMBEDDED_MODEL)
    assert exact != count_text_tokens(text)
    # A message costs its text plus the chat template's overhead, and the prompt count is what the model evaluates.
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", text)]
    counted = embedded_backend.count_prompt_tokens(messages)
    with_one_message = embedded_backend.count_prompt_tokens(messages[:1])
    assert counted - with_one_message == exact + embedded_backend.message_overhead()
    completion = await embedded_backend.chat(
        ChatRequest(messages, model=EMBEDDED_MODEL, num_ctx=2048, max_tokens=2)
    ).collect()
    assert completion.result.prompt_tokens == counted


async def test_embedded_refuses_a_prompt_larger_than_num_ctx(embedded_backend):
    big = [ChatMessage("user", "word " * 600)]
    with pytest.raises(ContextOverflow, match=r"the prompt is \d+ tokens and the context holds 256"):
        await embedded_backend.chat(ChatRequest(big, model=EMBEDDED_MODEL, num_ctx=256, max_tokens=10)).collect()


async def test_embedded_caps_the_reply_to_what_num_ctx_leaves(embedded_backend):
    prompt_tokens = embedded_backend.count_prompt_tokens(LONG)
    completion = await embedded_backend.chat(
        ChatRequest(LONG, model=EMBEDDED_MODEL, num_ctx=prompt_tokens + 6, max_tokens=500)
    ).collect()
    assert completion.result.prompt_tokens == prompt_tokens
    assert completion.result.completion_tokens == 6
    assert completion.result.done_reason == "length"


async def test_summaries_are_sent_as_background_work_and_turns_as_interactive(embedded_backend, fake_ollama):
    summary = [ChatMessage("user", "Summarize: the tide rose.")]
    turn = [ChatMessage("user", "And then?")]
    await embedded_backend.chat(
        ChatRequest(summary, model=EMBEDDED_MODEL, num_ctx=1024, max_tokens=2, background=True)
    ).collect()
    await embedded_backend.chat(ChatRequest(turn, model=EMBEDDED_MODEL, num_ctx=1024, max_tokens=2)).collect()
    # (A generation an earlier test abandoned may still end and be recorded: only these two count.)
    served = {s.last_message: s.priority for s in fake_ollama.behaviour.served}
    assert (served["Summarize: the tide rose."], served["And then?"]) == ("background", "interactive")


async def test_a_repeat_penalty_reaches_the_model_through_the_gateway(embedded_backend, fake_ollama):
    """Ollama's ``options.repeat_penalty`` goes out only when asked for, and llama.cpp samples with it."""
    gateway = Gateway(mode="embedded", embedded=embedded_backend, ollama=None)
    prompt = [
        ChatMessage("user", "Summarize: the user asked about logins. The assistant explained that logins are checked.")
    ]
    plain, curbed = [
        await gateway.complete(
            ChatRequest(
                prompt, model=EMBEDDED_MODEL, num_ctx=1024, max_tokens=48, sampling=Sampling(repeat_penalty=penalty)
            )
        )
        for penalty in (None, 1.3)
    ]
    sent = [r["options"] for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    assert [options.get("repeat_penalty") for options in sent] == [None, 1.3]
    # Greedy decoding with the same seed: only the penalty can make the two replies differ.
    assert plain.text != curbed.text


async def test_an_unreachable_model_server_is_named_with_what_to_do(closed_port_url):
    backend = EmbeddedBackend(host=closed_port_url, timeout=5)
    with pytest.raises(BackendUnavailable, match=r"bundled model server is not reachable at .*`make run` starts it"):
        await backend.chat(ChatRequest(HELLO, model=EMBEDDED_MODEL, num_ctx=1024, max_tokens=2)).collect()
    with pytest.raises(BackendUnavailable, match="the bundled model server is not reachable"):
        backend.count_prompt_tokens(HELLO)
    status = await Gateway(mode="embedded", embedded=backend, ollama=None).status()
    assert status.backend == "none"
    assert "the bundled model server is not reachable" in status.reason


def test_counting_on_a_connection_the_server_dropped_asks_again_on_a_new_one(model_server):
    backend = EmbeddedBackend(host=model_server.url, timeout=5)
    first = backend.count_prompt_tokens(HELLO)
    # The connection kept for the next count is cut, as a model server that restarted meanwhile leaves it.
    (kept,) = backend._counting._idle
    assert kept.sock is not None
    kept.sock.shutdown(socket.SHUT_RDWR)
    assert backend.count_prompt_tokens(HELLO) == first
    (again,) = backend._counting._idle
    assert again is not kept


def test_many_texts_are_counted_on_the_server_in_batches_exactly_as_one_by_one(model_server, fake_ollama):
    """When the app does not count here (tests/integration/test_local_counting.py), the server counts in batches."""
    embedded_backend = EmbeddedBackend(host=model_server.url, count_locally=False)
    texts = [
        f"Step {n}: src/app/step_{n}.py gets {n * 7} lines; naïve 🙂 {'x' * (n % 13)}"
        for n in range(TOKENIZE_BATCH + 20)
    ]
    fake_ollama.behaviour.requests.clear()
    counts = embedded_backend.count_texts_tokens(texts)
    batches = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/tokenize"]
    assert [len(r["texts"]) for r in batches] == [TOKENIZE_BATCH, 20]
    sample = [0, 1, TOKENIZE_BATCH - 1, TOKENIZE_BATCH, len(texts) - 1]
    assert [counts[i] for i in sample] == [embedded_backend.count_text_tokens(texts[i]) for i in sample]
    assert embedded_backend.count_texts_tokens([]) == []


def test_a_batch_that_is_not_a_list_is_refused_by_the_model_server(model_server):
    response = httpx.post(f"{model_server.url}/api/tokenize", json={"model": EMBEDDED_MODEL, "texts": "one"})
    assert response.status_code == 400
    assert response.json()["error"] == "texts must be a list of texts"


def test_the_exact_counter_counts_many_messages_as_it_counts_one(embedded_backend):
    counter = Gateway(mode="embedded", embedded=embedded_backend, ollama=None).token_counter(EMBEDDED_MODEL)
    texts = ["Hello there", "", "Deploy to eu-west-1 at 02:00 UTC."]
    assert counter.count_all(texts) == [counter.count(text) for text in texts]
    assert all(count.exact for count in counter.count_all(texts))


def test_while_the_model_server_is_away_messages_are_counted_by_the_estimate(closed_port_url):
    gateway = Gateway(mode="embedded", embedded=EmbeddedBackend(host=closed_port_url, timeout=5), ollama=None)
    count = gateway.token_counter(EMBEDDED_MODEL).count("A message stored while the server restarts.")
    assert not count.exact
    assert count.tokens > 0
    many = gateway.token_counter(EMBEDDED_MODEL).count_all(["an import", "while the server restarts"])
    assert [c.exact for c in many] == [False, False]
    assert all(c.tokens > 0 for c in many)
    prompt = gateway.count_prompt(HELLO, EMBEDDED_MODEL)
    assert not prompt.exact
    assert prompt.tokens > 0
