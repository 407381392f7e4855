"""The app counts plain text with the bundled model's vocabulary (engine.core.bpe), as the model server
counts it: on every text of the project's test data and on random text, with a fallback to the
server when the vocabulary is unknown or disagrees."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import httpx
import pytest

from engine.core.bpe import TextCounter
from engine.core.tokens import VocabularyError
from engine.llm.embedded import MODEL_NAME, EmbeddedBackend
from engine.llm.types import LLMRequestError

DATA = Path(__file__).resolve().parents[1] / "data"
PIECES = [
    *"abcXYZ019 \t\n\r.,;:'!?-_()[]{}<>|/\\\"#@$%^&*+=~`",
    *["é", "ß", "Ω", "ж", "中", "日", "😀", "👍🏽", "\u200d", "١", "½", "²", "Ⅻ", "\u00a0", "\u3000"],
    *["'s", "'ll", " '", "<|im_end|>", "<|im_start|>", "\ud800", "\n\n", "   "],
]


def data_texts() -> list[str]:
    """Every string in the JSON files of tests/data: conversations, questions, facts."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in sorted(DATA.rglob("*.json")):
        walk(json.loads(path.read_text(encoding="utf-8")))
    return list(dict.fromkeys(found))


def random_texts(count: int) -> list[str]:
    draw = random.Random(7)
    return ["".join(draw.choice(PIECES) for _ in range(draw.randint(1, 60))) for _ in range(count)]


@pytest.fixture
def server_counts(model_server):
    return EmbeddedBackend(host=model_server.url, count_locally=False)


def test_every_text_is_counted_here_as_the_model_server_counts_it(embedded_backend, server_counts):
    texts = data_texts() + random_texts(2_000)
    assert len(texts) > 10_000
    here = embedded_backend.count_texts_tokens(texts)
    assert embedded_backend._local_counter() is not None, "the app counted on the server"
    served = server_counts.count_texts_tokens(texts)
    differ = [(text[:80], a, b) for text, a, b in zip(texts, here, served, strict=True) if a != b]
    assert differ == []


def test_counting_here_asks_the_server_nothing_once_the_probe_agreed(model_server, server_counts, fake_ollama):
    texts = ["On 14 March 2026 we met in Galway.", "Biscuit is our dog."]
    backend = EmbeddedBackend(host=model_server.url)
    backend.count_text_tokens("The first count fetches the vocabulary and checks the probe.")
    expected = server_counts.count_texts_tokens(texts)
    fake_ollama.behaviour.requests.clear()
    assert backend.count_texts_tokens(texts) == expected
    assert [r["path"] for r in fake_ollama.behaviour.requests] == []


def test_the_model_server_hands_out_its_vocabulary(model_server):
    answer = httpx.post(f"{model_server.url}/api/vocabulary", json={"model": MODEL_NAME}).json()
    assert (answer["model"], answer["pre"], len(answer["merges"])) == ("gpt2", "smollm", 48_900)
    assert answer["merges"][0] == "Ġ t"
    unknown = httpx.post(f"{model_server.url}/api/vocabulary", json={"model": "no/such-model"})
    assert unknown.status_code == 404


def test_a_vocabulary_that_counts_the_probe_otherwise_leaves_counting_to_the_server(
    model_server, server_counts, monkeypatch, caplog
):
    monkeypatch.setattr(TextCounter, "count", lambda self, text: 0)
    backend = EmbeddedBackend(host=model_server.url)
    with caplog.at_level(logging.WARNING, logger="engine.llm.embedded"):
        counts = backend.count_texts_tokens(["Lisbon in May", "The Remains of the Day"])
    assert counts == server_counts.count_texts_tokens(["Lisbon in May", "The Remains of the Day"])
    assert counts != [0, 0]
    assert "counts a probe otherwise here" in caplog.text


def test_a_vocabulary_it_cannot_count_leaves_counting_to_the_server(model_server, server_counts, monkeypatch, caplog):
    def refuse(**vocabulary):
        raise VocabularyError("the model's pre-tokenizer 'qwen2' is not one of smollm")

    monkeypatch.setattr("engine.llm.embedded.from_gguf_vocabulary", refuse)
    backend = EmbeddedBackend(host=model_server.url)
    with caplog.at_level(logging.WARNING, logger="engine.llm.embedded"):
        assert backend.count_text_tokens("A Yaris, bought in 2024.") == server_counts.count_text_tokens(
            "A Yaris, bought in 2024."
        )
    assert "'qwen2' is not one of smollm" in caplog.text


def test_a_server_without_a_vocabulary_to_hand_out_counts_every_text(model_server, server_counts, monkeypatch, caplog):
    """A model server of an earlier release answers 404 for /api/vocabulary: the app counts on it, exactly."""
    post = EmbeddedBackend._post

    def earlier_release(self, path, body):
        if path == "/api/vocabulary":
            raise LLMRequestError("the bundled model server could not count tokens (404): not found")
        return post(self, path, body)

    monkeypatch.setattr(EmbeddedBackend, "_post", earlier_release)
    backend = EmbeddedBackend(host=model_server.url)
    with caplog.at_level(logging.WARNING, logger="engine.llm.embedded"):
        assert backend.count_text_tokens("Orla works at the aquarium.") == server_counts.count_text_tokens(
            "Orla works at the aquarium."
        )
        backend.count_text_tokens("Asked once: the refusal is kept.")
    assert caplog.text.count("counts every text") == 1
