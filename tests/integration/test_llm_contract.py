"""The same assertions against both backends, each over real HTTP to the bundled model
server: the embedded backend (exact counts, priorities) and the Ollama backend, which
sees the same server as an Ollama that serves SERVED_MODEL."""

from __future__ import annotations

import asyncio

import pytest

from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from engine.llm.types import GREEDY, ChatMessage, ChatRequest, ChatResult, ModelNotFound, Sampling
from tests.support.model_server import SERVED_MODEL, UNTAGGED_MODEL
from tests.support.timing import wait_until

HELLO = [ChatMessage("system", "You are terse."), ChatMessage("user", "Say hello.")]
LONG = [ChatMessage("user", "Count from 1 to 300, separated by commas.")]


@pytest.fixture(params=["embedded", "ollama"])
def backend_and_model(request, embedded_backend):
    if request.param == "embedded":
        return embedded_backend, EMBEDDED_MODEL
    return request.getfixturevalue("ollama_backend"), SERVED_MODEL


async def test_streams_deltas_then_a_final_result(backend_and_model):
    backend, model = backend_and_model
    stream = backend.chat(
        ChatRequest(HELLO, model=model, num_ctx=2048, max_tokens=32, sampling=Sampling(temperature=0, seed=7))
    )
    deltas = [delta async for delta in stream]
    assert len(deltas) >= 2
    assert all(isinstance(d, str) and d for d in deltas)
    result = stream.result
    assert isinstance(result, ChatResult)
    assert result.prompt_tokens > 10
    assert 0 < result.completion_tokens <= 32
    assert result.done_reason in {"stop", "length"}
    assert result.generation_seconds > 0  # measured over the two or more deltas above


async def test_the_cap_ends_a_reply_with_length(backend_and_model):
    backend, model = backend_and_model
    completion = await backend.chat(
        ChatRequest(LONG, model=model, num_ctx=2048, max_tokens=8, sampling=GREEDY)
    ).collect()
    assert completion.result.done_reason == "length"
    assert completion.result.completion_tokens == 8
    assert completion.text


async def test_temperature_zero_with_a_seed_repeats(backend_and_model, model_server):
    # The KV cache reuses a repeated prompt prefix (as Ollama does), which changes
    # the arithmetic slightly: a reply repeats for the same prompt *and* cache
    # state, so the first call only brings the cache to that state. Another generation
    # in the same batch changes it too: each call waits until the server is otherwise idle.
    backend, model = backend_and_model
    replies = []
    for _ in range(3):
        await asyncio.to_thread(model_server.wait_idle)
        request = ChatRequest(HELLO, model=model, num_ctx=2048, max_tokens=24, sampling=Sampling(temperature=0, seed=3))
        replies.append((await backend.chat(request).collect()).text)
    assert replies[1] == replies[2]
    assert replies[1]


async def test_the_stand_in_counts_the_generations_under_way(fake_ollama, ollama_backend):
    await asyncio.to_thread(fake_ollama.wait_idle)
    fake_ollama.behaviour.chunk_delay_seconds = 0.1
    stream = ollama_backend.chat(ChatRequest(LONG, model=SERVED_MODEL, num_ctx=2048, max_tokens=40, sampling=GREEDY))
    await anext(stream)
    assert fake_ollama.record()["in_flight"] == 1
    await stream.aclose()
    await asyncio.to_thread(fake_ollama.wait_idle)  # the closed generation ends, and is no longer counted


async def test_closing_the_stream_stops_generation(backend_and_model, embedded_backend, fake_ollama):
    backend, model = backend_and_model
    # Paced, so the model is still generating when the client leaves: greedy decoding of this prompt sometimes
    # ends after a dozen tokens (the reuse of a cached prefix changes the path), before any client could hang up.
    fake_ollama.behaviour.chunk_delay_seconds = 0.1
    stream = backend.chat(ChatRequest(LONG, model=model, num_ctx=2048, max_tokens=400, sampling=GREEDY))
    received = []
    async for delta in stream:
        received.append(delta)
        if len(received) == 3:
            break
    await stream.aclose()
    # The server stops generating when its client goes away, and records how the run ended.
    prompt_tokens = embedded_backend.count_prompt_tokens(LONG)

    def ours():
        return [s for s in fake_ollama.behaviour.served if s.prompt_tokens == prompt_tokens]

    await asyncio.to_thread(wait_until, ours, timeout=60, what="the server to end the closed generation")
    assert ours()[-1].done_reason == "cancelled"
    assert ours()[-1].completion_tokens < 12  # fewer than the shortest uncancelled reply


async def test_model_info_and_list(backend_and_model):
    backend, model = backend_and_model
    info = await backend.model_info(model)
    assert info.name == model
    assert info.parameter_size_b == pytest.approx(0.135)
    assert info.context_length == 8192
    assert info.family == "llama"
    assert model in [m.name for m in await backend.list_models()]
    assert await backend.health()


async def test_an_unknown_model_is_reported(backend_and_model):
    backend, _ = backend_and_model
    with pytest.raises(ModelNotFound, match="mistral:7b"):
        await backend.chat(ChatRequest(HELLO, model="mistral:7b", num_ctx=2048, max_tokens=8)).collect()
    with pytest.raises(ModelNotFound):
        await backend.model_info("mistral:7b")


async def test_a_canned_reply_stops_at_the_cap_as_the_model_would(backend_and_model, embedded_backend, fake_ollama):
    """The stand-in's fixed reply obeys ``num_predict`` as generation does: cut after that many of
    the model's tokens and ended with "length", with the exact counts of the prompt and the reply."""
    text = "The handler validates the form, hashes the password and records the login in the audit log."
    fake_ollama.behaviour.canned_reply = text
    backend, model = backend_and_model
    whole_tokens = embedded_backend.count_text_tokens(text)
    prompt_tokens = embedded_backend.count_prompt_tokens(HELLO)

    capped = await backend.chat(ChatRequest(HELLO, model=model, num_ctx=2048, max_tokens=7, sampling=GREEDY)).collect()
    assert capped.result.done_reason == "length"
    assert capped.result.completion_tokens == 7
    assert embedded_backend.count_text_tokens(capped.text) == 7
    assert text.startswith(capped.text)
    assert len(capped.text) < len(text)
    assert capped.result.prompt_tokens == prompt_tokens

    whole = await backend.chat(
        ChatRequest(HELLO, model=model, num_ctx=2048, max_tokens=whole_tokens, sampling=GREEDY)
    ).collect()
    assert (whole.text, whole.result.done_reason) == (text, "stop")
    assert whole.result.completion_tokens == whole_tokens
    assert whole.result.prompt_tokens == prompt_tokens


async def test_the_stand_in_reports_the_size_a_test_gives_a_model(ollama_backend, fake_ollama):
    """An Ollama serves models of many sizes: the stand-in reports the size a test gives a name."""
    fake_ollama.behaviour.parameter_sizes = {UNTAGGED_MODEL: "13B"}
    assert (await ollama_backend.model_info(UNTAGGED_MODEL)).parameter_size_b == 13.0
    assert (await ollama_backend.model_info(SERVED_MODEL)).parameter_size_b == pytest.approx(0.135)
