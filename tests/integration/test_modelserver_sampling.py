"""The bundled model server samples as Ollama does: each sampling option of a request is honoured, and a
request that sets none gets Ollama's defaults (temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1
over the last 64 tokens).

llama.cpp's logits depend a little on how the prompt was split into batches, which depends on what the
context evaluated before (the prefix it reuses): two replies are compared only after the same request
has set the context to the same state (``ask``).
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from engine.llm.embedded import MODEL_NAME
from tests.support.timing import scaled

# Without a repeat penalty the bundled model writes this fact on every line of the list.
LOOPING = "List ten facts about cats."
STORY = "Tell me a story about a lighthouse keeper."
LIST_NUMBER = re.compile(r"^\s*\d+\s*[.:)]\s*")
# Asked before each compared request, so that each starts from the same context.
RESET = "Say one word."
OLLAMA_DEFAULTS: dict[str, Any] = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.9,
    "repeat_penalty": 1.1,
    "repeat_last_n": 64,
}


@pytest.fixture
def http(fake_ollama):
    with httpx.Client(base_url=fake_ollama.url, timeout=scaled(120)) as client:
        yield client


def ask(http: httpx.Client, prompt: str, max_tokens: int = 60, **options: Any) -> str:
    for content, sent in ((RESET, {"temperature": 0.0, "num_predict": 1}), (prompt, options)):
        response = http.post(
            "/api/chat",
            json={
                "model": MODEL_NAME,
                "messages": [{"role": "user", "content": content}],
                "stream": False,
                "options": {"num_ctx": 1024, "num_predict": max_tokens, **sent},
            },
        )
        response.raise_for_status()
    return str(response.json()["message"]["content"])


def line_repeats(text: str) -> int:
    """How often the most repeated line of a numbered list is there, numbers aside ("1." or "1:")."""
    lines = [LIST_NUMBER.sub("", line).strip() for line in text.splitlines() if line.strip()]
    return max(lines.count(line) for line in lines)


def test_a_request_without_sampling_options_gets_ollamas_defaults(http, fake_ollama):
    plain = ask(http, STORY)
    assert plain == ask(http, STORY, **OLLAMA_DEFAULTS)
    nulls: dict[str, Any] = dict.fromkeys(OLLAMA_DEFAULTS)
    assert plain == ask(http, STORY, **nulls), "null is the default, as left out"
    assert plain != ask(http, STORY, temperature=0.0), "the default is not greedy"
    assert "temperature" not in fake_ollama.behaviour.requests[1]["options"], "the request itself set none"


def test_the_same_seed_gives_the_same_reply_and_another_seed_another(http):
    first = ask(http, STORY, temperature=1.0, seed=7)
    assert ask(http, STORY, temperature=1.0, seed=7) == first
    assert ask(http, STORY, temperature=1.0, seed=8) != first


def test_temperature_zero_top_k_one_and_top_p_zero_each_take_the_likeliest_token(http):
    greedy = ask(http, STORY, temperature=0.0)
    assert ask(http, STORY, temperature=1.5, top_k=1) == greedy
    assert ask(http, STORY, temperature=1.5, top_p=0.0) == greedy
    assert ask(http, STORY, temperature=1.5) != greedy


def test_a_repeat_penalty_breaks_the_loop_over_the_tokens_of_repeat_last_n(http):
    # Every compared call finds the prompt already in its slot's cache (the same conversation returns to
    # the same slot): a prompt read from scratch and one read from the cache can tip a greedy tie apart.
    ask(http, LOOPING, max_tokens=1, temperature=0.0)
    looping = ask(http, LOOPING, max_tokens=120, temperature=0.0, repeat_penalty=1.0)
    assert line_repeats(looping) >= 4, looping
    penalized = ask(http, LOOPING, max_tokens=120, temperature=0.0, repeat_penalty=1.3)
    assert line_repeats(penalized) < 3, penalized
    assert ask(http, LOOPING, max_tokens=120, temperature=0.0, repeat_penalty=1.3, repeat_last_n=0) == looping, (
        "a penalty over no tokens is none"
    )


def test_a_malformed_sampling_option_is_refused(http):
    response = http.post(
        "/api/chat",
        json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "options": {"top_k": "many"}},
    )
    assert response.status_code == 400
    assert "malformed" in response.json()["error"]


def test_a_canned_reply_ignores_the_sampling_options(http, fake_ollama):
    fake_ollama.behaviour.canned_reply = "Always this."
    assert ask(http, STORY, temperature=1.9, top_k=3, seed=5) == "Always this."
