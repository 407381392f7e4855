"""Counting text with a GGUF vocabulary's byte-level BPE (engine.core.bpe), on small vocabularies
written here; tests/integration/test_local_counting.py checks the bundled model's against its server."""

from __future__ import annotations

import pytest

from engine.core.bpe import from_gguf_vocabulary
from engine.core.tokens import VocabularyError

# GPT-2's stand-ins: "Ġ" is the space byte, "Ċ" the newline.
MERGES = ["h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o", "r l", "Ġwo rl", "Ġworl d", "Ċ Ċ", "Ġ Ġ"]


def counter():
    return from_gguf_vocabulary(model="gpt2", pre="smollm", merges=MERGES)


def test_merges_join_bytes_in_their_order():
    assert counter().count("hello") == 1
    assert counter().count("hello world") == 2
    # No merge joins "x" to anything: each byte is a token, a multi-byte character several.
    assert counter().count("xyz") == 3
    assert counter().count("é") == 2


def test_every_digit_is_a_piece_of_its_own():
    assert counter().count("2026") == 4
    assert counter().count("hello2026") == 5


def test_runs_of_whitespace_split_as_llama_cpp_splits_them():
    # Before a word, the last space goes with it; the run before it is a piece ("ĠĠ" merges).
    assert counter().count("hello   world") == 3
    # Before a digit, the run ends where the digit is isolated: the two spaces are one piece.
    assert counter().count("hello  1") == 3
    # Newlines before a word: the run but its last newline is a piece ("ĊĊ" merges), that newline another.
    assert counter().count("\n\n\nhello") == 3


def test_special_token_strings_are_plain_text_and_lone_surrogates_count():
    assert counter().count("<|im_end|>") == len("<|im_end|>")
    assert counter().count("\ud800") == counter().count("?")
    assert counter().count("") == 0


@pytest.mark.parametrize(
    ("model", "pre", "merges", "why"),
    [
        ("llama", "smollm", MERGES, "not a byte-level BPE"),
        ("gpt2", "qwen2", MERGES, "pre-tokenizer 'qwen2' is not one of smollm"),
        ("gpt2", "smollm", ["h \u4e00"], "stands for no byte"),
    ],
)
def test_a_vocabulary_it_cannot_count_exactly_is_refused(model, pre, merges, why):
    with pytest.raises(VocabularyError, match=why):
        from_gguf_vocabulary(model=model, pre=pre, merges=merges)
