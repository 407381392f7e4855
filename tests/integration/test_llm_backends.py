"""What only one backend does: Ollama's failure modes over real HTTP, the embedded model's exact counts."""

from __future__ import annotations

import asyncio

import pytest

from contextmgr.core.tokens import count_text_tokens
from contextmgr.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from contextmgr.llm.embedded import EmbeddedBackend
from contextmgr.llm.gateway import Gateway
from contextmgr.llm.ollama_backend import OllamaBackend, parse_parameter_size
from contextmgr.llm.types import (
    BackendUnavailable,
    ChatMessage,
    ContextOverflow,
    LLMRequestError,
    LLMTimeout,
    ModelNotFound,
)
from tests.support.fake_ollama import SERVED_MODEL

HELLO = [ChatMessage("user", "Say hello.")]
LONG = [ChatMessage("user", "Count from 1 to 300, separated by commas.")]


async def test_ollama_receives_num_ctx_and_the_cap_on_every_call(ollama_backend, fake_ollama):
    await ollama_backend.chat(HELLO, model=SERVED_MODEL, num_ctx=1700, max_tokens=5, stop=["\n\n"], seed=1).collect()
    (request,) = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    assert request["options"] == {"num_ctx": 1700, "num_predict": 5, "temperature": 0.0, "stop": ["\n\n"], "seed": 1}
    assert request["stream"] is True
    assert request["messages"] == [{"role": "user", "content": "Say hello."}]


async def test_unreachable_server_is_reported_at_the_first_iteration(closed_port_url):
    backend = OllamaBackend(host=closed_port_url)
    stream = backend.chat(HELLO, model=SERVED_MODEL, num_ctx=2048, max_tokens=5)
    with pytest.raises(BackendUnavailable, match=f"Ollama is not reachable at {closed_port_url}: start it with"):
        await stream.collect()
    with pytest.raises(BackendUnavailable):
        await backend.list_models()
    assert not await backend.health()


async def test_missing_model_tells_how_to_pull_it(ollama_backend):
    with pytest.raises(ModelNotFound, match=r"model llama3.2:3b is not pulled; run `ollama pull llama3.2:3b`"):
        await ollama_backend.chat(HELLO, model="llama3.2:3b", num_ctx=2048, max_tokens=5).collect()


async def test_a_stream_dropped_half_way(ollama_backend, fake_ollama):
    fake_ollama.behaviour.drop_after_chunks = 3
    stream = ollama_backend.chat(LONG, model=SERVED_MODEL, num_ctx=2048, max_tokens=200)
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
        await backend.chat(HELLO, model=SERVED_MODEL, num_ctx=2048, max_tokens=5).collect()


async def test_a_server_error_is_reported_with_its_status(ollama_backend, fake_ollama):
    fake_ollama.behaviour.fail_status = 500
    with pytest.raises(LLMRequestError, match=r"Ollama refused the request \(500\): the fake server was told to fail"):
        await ollama_backend.chat(HELLO, model=SERVED_MODEL, num_ctx=2048, max_tokens=5).collect()


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
    llama = embedded_backend._load().llama
    assert exact == len(llama.tokenize(text.encode(), add_bos=False, special=False))
    assert exact != count_text_tokens(text)


async def test_embedded_refuses_a_prompt_larger_than_num_ctx(embedded_backend):
    big = [ChatMessage("user", "word " * 600)]
    with pytest.raises(ContextOverflow, match=r"the prompt is \d+ tokens and the context holds 256"):
        await embedded_backend.chat(big, model=EMBEDDED_MODEL, num_ctx=256, max_tokens=10).collect()


async def test_embedded_caps_the_reply_to_what_num_ctx_leaves(embedded_backend):
    prompt_tokens = embedded_backend.count_prompt_tokens(LONG)
    completion = await embedded_backend.chat(
        LONG, model=EMBEDDED_MODEL, num_ctx=prompt_tokens + 6, max_tokens=500
    ).collect()
    assert completion.result.prompt_tokens == prompt_tokens
    assert completion.result.completion_tokens == 6
    assert completion.result.done_reason == "length"


def test_embedded_sends_the_tokens_llama_cpp_would_make_of_the_prompt_text(embedded_backend):
    """The prompt goes to llama.cpp as tokens, tokenized once: they must be the ones it builds from the text."""
    prompt, _ = embedded_backend.prompt_for([ChatMessage("system", "Be brief."), *LONG])
    llama = embedded_backend._load().llama
    # llama-cpp-python's rule for a text prompt: the model's BOS if it wants one, then the text, specials parsed.
    bos = [llama.token_bos()] if llama._model.add_bos_token() else []
    tokens = embedded_backend.prompt_tokens(prompt)
    assert list(tokens) == bos + llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
    assert embedded_backend.prompt_tokens(prompt) is tokens, "a prompt counted once is not tokenized again"


def test_embedded_remembers_only_the_last_few_prompts(embedded_backend):
    from contextmgr.llm.embedded import TOKENIZED_PROMPTS_KEPT

    first = embedded_backend.prompt_tokens("prompt 0")
    for n in range(1, TOKENIZED_PROMPTS_KEPT + 1):
        embedded_backend.prompt_tokens(f"prompt {n}")
    again = embedded_backend.prompt_tokens("prompt 0")
    assert again == first
    assert again is not first
    assert len(embedded_backend._tokenized) == TOKENIZED_PROMPTS_KEPT


class CountingLock:
    """Wraps the model's lock to see how many generations hold it at once."""

    def __init__(self, inner):
        self.inner, self.holders, self.most, self.entries = inner, 0, 0, 0

    def __enter__(self):
        self.inner.acquire()
        self.holders += 1
        self.entries += 1
        self.most = max(self.most, self.holders)

    def __exit__(self, *exc_info):
        self.holders -= 1
        self.inner.release()


async def test_embedded_generation_is_serialized(embedded_backend, monkeypatch):
    loaded = embedded_backend._load()
    counting = CountingLock(loaded.lock)
    monkeypatch.setattr(loaded, "lock", counting)

    async def reply(n: int) -> str:
        stream = embedded_backend.chat(
            [ChatMessage("user", f"Name the number {n}.")], model=EMBEDDED_MODEL, num_ctx=1024, max_tokens=6
        )
        return str((await stream.collect()).text)

    texts = await asyncio.gather(reply(1), reply(2), reply(3))
    assert all(texts)
    assert (counting.entries, counting.most) == (3, 1)


def test_embedded_without_its_package(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    backend = EmbeddedBackend()
    assert not asyncio.run(backend.health())


async def test_gateway_auto_falls_back_to_embedded_and_says_why(embedded_backend, closed_port_url):
    gateway = Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=closed_port_url))
    status = await gateway.status()
    assert (status.backend, status.default_model) == ("embedded", EMBEDDED_MODEL)
    assert status.reason == f"Ollama is not reachable at {closed_port_url}; using the embedded model"
    assert [m.name for m in await gateway.list_models()] == [EMBEDDED_MODEL]


async def test_gateway_auto_prefers_ollama_and_merges_model_lists(embedded_backend, fake_ollama):
    gateway = Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=fake_ollama.url))
    status = await gateway.status()
    assert (status.backend, status.default_model) == ("ollama", SERVED_MODEL)
    assert [(m.name, m.backend) for m in await gateway.list_models()] == [
        (EMBEDDED_MODEL, "embedded"),
        (SERVED_MODEL, "ollama"),
    ]
    assert gateway.backend_for(EMBEDDED_MODEL) is embedded_backend
    assert await gateway.count_tokens("hi", EMBEDDED_MODEL) is not None
    assert await gateway.count_tokens("hi", SERVED_MODEL) is None


async def test_gateway_learns_a_correction_factor_from_ollama_counts(embedded_backend, fake_ollama):
    gateway = Gateway(mode="ollama", embedded=embedded_backend, ollama=OllamaBackend(host=fake_ollama.url))
    assert gateway.calibration.factor(SERVED_MODEL) == 1.0
    messages = [
        ChatMessage("system", "You answer questions about software architecture, briefly and precisely."),
        ChatMessage("user", "Explain context windows in one sentence, mentioning src/auth/login.ts and 13,600 tokens."),
    ]
    completion = await gateway.complete(messages, model=SERVED_MODEL, num_ctx=2048, max_tokens=4)
    factor = gateway.calibration.factor(SERVED_MODEL)
    estimate = sum(count_text_tokens(m.content) + 4 for m in messages)
    assert completion.result.prompt_tokens != estimate
    assert factor == pytest.approx(completion.result.prompt_tokens / estimate)
    assert gateway.estimate_tokens("hello world", SERVED_MODEL) == -(-count_text_tokens("hello world") * factor // 1)


async def test_gateway_modes_switch_backends_off(embedded_backend, fake_ollama, closed_port_url):
    only_embedded = Gateway(mode="embedded", embedded=embedded_backend, ollama=OllamaBackend(host=fake_ollama.url))
    with pytest.raises(ModelNotFound, match="OLLM_LLM_BACKEND=embedded turns off"):
        only_embedded.backend_for(SERVED_MODEL)
    assert (await only_embedded.status()).reason == "OLLM_LLM_BACKEND=embedded"
    only_ollama = Gateway(mode="ollama", embedded=embedded_backend, ollama=OllamaBackend(host=closed_port_url))
    with pytest.raises(ModelNotFound, match="OLLM_LLM_BACKEND=ollama turns off"):
        only_ollama.backend_for(EMBEDDED_MODEL)
    assert (await only_ollama.status()).backend == "none"
    assert not await only_ollama.health()
    with pytest.raises(ValueError, match="OLLM_LLM_BACKEND must be one of auto, ollama, embedded"):
        Gateway(mode="cloud", embedded=None, ollama=None)


def test_one_backend_serves_calls_from_several_event_loops(fake_ollama):
    # As compressions do: each async_to_sync call in a worker thread runs its own loop.
    backend = OllamaBackend(host=fake_ollama.url)
    for _ in range(3):
        completion = asyncio.run(backend.chat(HELLO, model=SERVED_MODEL, num_ctx=2048, max_tokens=3).collect())
        assert completion.result.completion_tokens > 0
