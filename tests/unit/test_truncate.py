from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.truncate import fact_extract, shorten_extractive
from engine.resources import count_text_tokens

TEXT = (
    "We looked at three options for sessions. Cookies were simplest. "
    "[DECISION] Use JWT for authentication - LOCKED\n"
    "The helper lives in one file. [ARTIFACT] Created src/auth/jwt.ts\n"
    "Then we measured it twice and wrote everything down in detail for later."
)


def test_short_text_is_unchanged():
    assert shorten_extractive("Hello.", 10, count_text_tokens) == "Hello."


def test_marker_sentences_are_chosen_first_and_order_is_kept():
    result = shorten_extractive(TEXT, 25, count_text_tokens)
    assert count_text_tokens(result) <= 25
    assert result == "[DECISION] Use JWT for authentication - LOCKED\n[ARTIFACT] Created src/auth/jwt.ts"
    longer = shorten_extractive(TEXT, 40, count_text_tokens)
    assert longer.startswith("We looked at three options for sessions.\n")
    assert "[ARTIFACT] Created src/auth/jwt.ts" in longer


def test_a_counter_that_charges_more_for_joins_is_still_respected():
    def costly_newlines(text: str) -> int:
        return len(text.split()) + 5 * text.count("\n")

    result = shorten_extractive("One two. Three four. Five six.", 5, costly_newlines)
    assert costly_newlines(result) <= 5
    assert result == "One two."


def test_one_long_sentence_is_cut_at_a_word_with_an_ellipsis():
    result = shorten_extractive("word " * 100, 10, count_text_tokens)
    assert result.endswith(" …")
    assert count_text_tokens(result) <= 10


def test_nothing_fits():
    assert shorten_extractive("unbelievable", 0, count_text_tokens) == ""


@settings(max_examples=100, deadline=None)
@given(st.text(), st.integers(min_value=0, max_value=50))
def test_always_within_budget(text, budget):
    assert count_text_tokens(shorten_extractive(text, budget, count_text_tokens)) <= budget


def test_the_fact_extract_keeps_fact_clauses_within_budget_and_nothing_without_facts():
    texts = ["The rate is 5e-4. It helps to be careful. Batch size 64 on 12 classes.", "Thanks, that is all."]
    assert fact_extract(texts, 100, lambda t: len(t.split())) == "The rate is 5e-4.\nBatch size 64 on 12 classes."
    assert fact_extract(texts, 5, lambda t: len(t.split())) == "The rate is 5e-4."
    assert fact_extract(["Nothing to see here."], 100, lambda t: len(t.split())) == ""


def test_the_fact_extract_leaves_out_greetings_and_questions_without_a_value():
    texts = [
        "Morning Noreen! We walked the Turia gardens on Saturday. Did the parade go ahead on Friday?",
        "Is the replica on port 5432?",
    ]
    assert fact_extract(texts, 200, lambda t: len(t.split())) == (
        "We walked the Turia gardens on Saturday.\nIs the replica on port 5432?"
    )
