"""The cleaning of a small model's title, its fallback, and a branch's title (engine.core.titles)."""

from __future__ import annotations

import pytest

from engine.core.titles import TITLE_MAX_CHARS, branch_title, clean_title, fallback_title, title_prompt


@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ('"Basil care in winter"', "Basil care in winter"),
        ("Title: Basil care in winter.\nThe user asks about basil.", "Basil care in winter"),
        ("**Keeping basil alive**", "Keeping basil alive"),
        ("\n\n  'Windowsill herbs'  \n", "Windowsill herbs"),
        ("Sure!", ""),
        ("I'm sorry, I cannot do that.", ""),
        ("...", ""),
        ("", ""),
    ],
)
def test_an_answer_is_cleaned_to_one_short_line_or_nothing(answer, title):
    assert clean_title(answer) == title


def test_a_long_answer_is_cut_at_a_word_within_the_limit():
    title = clean_title("Growing basil " + "and other kitchen herbs " * 10)
    assert len(title) <= TITLE_MAX_CHARS
    assert title.startswith("Growing basil and other")
    assert not title.endswith(" ")
    assert title.split(" ")[-1] in {"and", "other", "kitchen", "herbs"}


def test_the_fallback_is_the_first_words_of_the_first_message():
    assert fallback_title("How do I keep basil alive on a windowsill?") == "How do I keep basil alive"
    assert fallback_title("  **Fix** the   build  ") == "Fix the build"
    assert len(fallback_title("x" * 500)) == TITLE_MAX_CHARS


def test_the_prompt_quotes_the_start_of_the_exchange_on_few_lines():
    prompt = title_prompt("line one\nline two " + "y" * 1000, "reply")
    assert "User: line one line two" in prompt
    assert prompt.endswith("Title:")
    assert len(prompt) < 1200


def test_a_branch_is_named_after_its_parent_within_the_limit():
    assert branch_title("Basil care", 9, limit=200) == "Basil care (branch at message 9)"
    long = branch_title("x" * 200, 12, limit=200)
    assert len(long) == 200
    assert long.endswith("x (branch at message 12)")
