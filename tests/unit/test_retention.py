from __future__ import annotations

import random
import re

import pytest

from engine.core.clauses import distinctive_words, reference_facts
from engine.core.fact_extraction import extract_facts
from engine.core.retention import (
    Fact,
    facts_from_json,
    facts_to_json,
    measure_retention,
    normalize,
    spaced,
)

CONVERSATION = [
    "We'll use JWT with httpOnly cookies. The handler lives in src/auth/login.ts and config.yaml.",
    "Set `MAX_RETRIES = 5` and a timeout of 30 s; the image is 2.5 GB. Docs: https://example.com/auth?x=1.",
    'The error says "token expired" after 15 min.\n[DECISION] Store refresh tokens in Redis - LOCKED',
    "[ARTIFACT] Created src/auth/refresh.ts\n[NEXT] Add the logout endpoint",
]


def test_facts_of_every_kind_are_found_once_in_order_of_appearance():
    facts = extract_facts([*CONVERSATION, CONVERSATION[0]])
    assert [(f.kind, f.text) for f in facts] == [
        ("decision", "use JWT"),
        ("identifier", "httpOnly"),
        ("path", "src/auth/login.ts"),
        ("path", "config.yaml"),
        ("code", "MAX_RETRIES = 5"),
        ("number", "30 s"),
        ("number", "2.5 GB"),
        ("url", "https://example.com/auth?x=1"),
        ("quote", "token expired"),
        ("number", "15 min"),
        ("decision", "Store refresh tokens in Redis"),
        ("path", "src/auth/refresh.ts"),
        ("marker", "Add the logout endpoint"),
    ]


def test_decision_objects_skip_pronouns_and_articles():
    assert extract_facts(["I use it daily.", "Let's use the"]) == ()
    assert extract_facts(["we decided to use Postgres."]) == (Fact("decision", "use Postgres"),)


def test_retention_is_the_share_of_facts_still_findable():
    facts = extract_facts(CONVERSATION)
    summary = (
        "Auth: use JWT with httpOnly cookies in SRC/auth/login.ts; timeout 30s, 15 min expiry ('token expired').\n"
        "Decisions: Store refresh tokens in Redis"
    )
    retention = measure_retention(facts, summary)
    assert retention.total == 13
    assert retention.kept == 7
    assert {f.text for f in retention.missing} == {
        "config.yaml",
        "https://example.com/auth?x=1",
        "MAX_RETRIES = 5",
        "2.5 GB",
        "src/auth/refresh.ts",
        "Add the logout endpoint",
    }
    assert retention.score == 7 / 13


def test_nothing_to_keep_is_full_retention():
    assert measure_retention((), "anything").score == 1.0


def test_normalize_ignores_case_spaces_quotes_and_edge_punctuation():
    assert normalize("  “Use JWT”, ") == "usejwt"
    assert normalize("3.2 m") == normalize("3.2m")


def test_facts_round_trip_through_json_and_bad_rows_are_dropped():
    facts = extract_facts(CONVERSATION)
    assert facts_from_json(facts_to_json(facts)) == facts
    assert facts_from_json([["path", "a.py"], ["weird", "x"], ["path"], "x", ["number", 5]]) == (Fact("path", "a.py"),)
    assert facts_from_json({"not": "a list"}) == ()


def test_hostile_input_is_bounded():
    facts = extract_facts([f"file{n}.py " for n in range(500)])
    assert len(facts) == 200
    assert extract_facts(["`" + "x" * 5000 + "`", "a" * 200 + ".py"]) == ()


def test_distinctive_words_weigh_half_as_much_as_the_specific_tokens():
    texts = ["Our beagle Biscuit has asthma.", "The beagle sleeps all day.", "We"]
    assert sorted(distinctive_words(texts)) == ["asthma", "sleeps"]
    reference = reference_facts(texts)
    assert {fact.kind for fact in reference} == {"token", "word"}
    kept = measure_retention(reference, "Biscuit sleeps")
    # One token of one (Biscuit) and one word of two (sleeps), the tokens counting twice: (2 + 0.5) / 3.
    assert (kept.total, kept.kept, kept.words_total, kept.words_kept) == (3, 2, 2, 1)
    assert kept.score == pytest.approx(2.5 / 3)
    assert measure_retention([Fact("word", "asthma")], "no").score == 0.0
    assert measure_retention([], "no").score == 1.0


def test_a_token_is_found_whole_as_the_pattern_of_its_definition_finds_it():
    # The search is written without a regular expression (one a fact compiled each time); it must answer
    # as ``(?<![\w#])token(?!\w)`` does, on random tokens and texts over letters of two alphabets, digits,
    # "#", "_", spaces and punctuation.
    draw = random.Random(7)
    alphabet = "aF1_#é٣ .-x"
    agreed = 0
    for _ in range(5000):
        token = "".join(draw.choices(alphabet, k=draw.randint(1, 3))).strip() or "a"
        text = "".join(draw.choices(alphabet, k=draw.randint(0, 14)))
        pattern = rf"(?<![\w#]){re.escape(spaced(token))}(?!\w)"
        expected = re.search(pattern, spaced(text)) is not None
        assert measure_retention([Fact("token", token)], text).kept == int(expected), (token, text)
        agreed += expected
    assert 100 < agreed < 4900, "the draw gives both answers often enough to test them"
