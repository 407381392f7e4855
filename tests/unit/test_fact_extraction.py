"""The fact extractor on a corpus of its own (tests/data/facts_corpus.json).

Each case is a sentence or a markdown/code snippet with every fact it holds
(kind and verbatim text) and the tempting non-facts that must not be
extracted. Recall must be 1.0 on the corpus and precision at least 0.95: a
fact that is no fact costs prompt tokens in every checkpoint's ledger.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from engine.core.fact_extraction import MAX_FACTS, extract_facts
from engine.core.retention import Fact, facts_from_json, facts_to_json, normalize

DATA = Path(__file__).resolve().parents[1] / "data"
CASES = json.loads((DATA / "facts_corpus.json").read_text())["cases"]
CONVERSATIONS = sorted((DATA / "retention_prose").glob("*.json"))


def _pairs(facts):
    return {(fact.kind, fact.text) for fact in facts}


@pytest.mark.parametrize("case", CASES, ids=[f"{n}-{c['kind']}" for n, c in enumerate(CASES)])
def test_every_fact_is_found_with_its_kind_and_no_non_fact(case):
    facts = extract_facts([case["text"]])
    expected = {(kind, text) for kind, text in case["facts"]}
    assert expected <= _pairs(facts), f"missed: {expected - _pairs(facts)}"
    found = {normalize(fact.text) for fact in facts}
    assert not [text for text in case["not"] if normalize(text) in found]


def test_precision_and_recall_on_the_corpus():
    kinds: Counter[str] = Counter()
    true_positives = false_positives = false_negatives = 0
    for case in CASES:
        got = _pairs(extract_facts([case["text"]]))
        expected = {(kind, text) for kind, text in case["facts"]}
        kinds.update(kind for kind, _ in expected)
        true_positives += len(got & expected)
        false_positives += len(got - expected)
        false_negatives += len(expected - got)
    precision = true_positives / (true_positives + false_positives)
    recall = true_positives / (true_positives + false_negatives)
    print(f"\nfact corpus: {len(CASES)} cases, facts per kind {dict(sorted(kinds.items()))}")
    print(f"precision {precision:.3f}, recall {recall:.3f}")
    assert recall == 1.0
    assert precision >= 0.95
    # Every kind is in the corpus, in prose and in code or markdown.
    assert set(kinds) == {
        "decision", "path", "url", "host", "identifier", "number", "version", "date", "name", "code", "quote", "marker"
    }  # fmt: skip


def test_every_corpus_fact_is_a_verbatim_span_of_its_text():
    for case in CASES:
        for _, text in case["facts"]:
            assert text in case["text"]


def test_the_evaluation_conversations_plant_facts_the_extractor_finds():
    assert len(CONVERSATIONS) == 8
    for path in CONVERSATIONS:
        conversation = json.loads(path.read_text())
        turns = conversation["turns"]
        assert 8 <= len(turns) <= 12, path.name
        facts = extract_facts(text for turn in turns for text in (turn["user"], turn["assistant"]))
        found = _pairs(facts)
        planted = {(kind, text) for kind, text in conversation["facts"]}
        assert planted <= found, f"{path.name} missed: {planted - found}"
        users = " ".join(turn["user"] for turn in turns)
        assistants = " ".join(turn["assistant"] for turn in turns)
        # Planted in both roles, and every locked decision is said by a marker.
        assert any(text in users for _, text in planted), path.name
        assert any(text in assistants for _, text in planted), path.name
        for decision in conversation["locked_decisions"]:
            assert f"[DECISION] {decision} - LOCKED" in assistants, (path.name, decision)


def test_overlapping_spans_keep_the_longest():
    facts = extract_facts(['The log says "cannot reach db-billing-01 in eu-west-1" at https://status.acme.io/eu.'])
    assert [(f.kind, f.text) for f in facts] == [
        ("quote", "cannot reach db-billing-01 in eu-west-1"),
        ("url", "https://status.acme.io/eu"),
    ]


def test_markers_count_even_when_their_text_is_not_verbatim_and_goals_are_no_facts():
    facts = extract_facts(["[GOAL] Ship the billing API\n[DECISION] Use   Redis  now - LOCKED"])
    assert facts == (Fact("decision", "Use Redis now"),)
    # Its normalized text is still found in the message.
    assert normalize("Use Redis now") in normalize("[DECISION] Use   Redis  now - LOCKED")


def test_decisions_keep_their_case_after_a_letter_whose_lowercase_is_longer():
    facts = extract_facts(["İ: we'll use Redis. WE'LL USE KAFKA."])
    assert _pairs(facts) == {("decision", "use Redis"), ("decision", "USE KAFKA")}


def test_names_by_pair_list_role_and_title():
    facts = _pairs(
        extract_facts(["Then Maria Thanks. Dev will review. Mr. Okafor and ask Abebe; Zanele Mokoena approved."])
    )
    assert facts == {
        ("name", "Maria"),
        ("name", "Dev"),
        ("name", "Mr. Okafor"),
        ("name", "Abebe"),
        ("name", "Zanele Mokoena"),
    }
    assert extract_facts(["Amazon Web Services and New York Times; Then de Souza."]) == ()


def test_a_word_glued_to_a_month_or_product_is_no_date_or_version():
    assert extract_facts(["XMarch 14 and SuperPython 3 and fooport 8080"]) == (Fact("identifier", "SuperPython"),)


def test_version_keywords_take_short_numbers_only():
    assert _pairs(extract_facts(["version 3.2 and release 4-beta"])) == {("version", "version 3.2")}


def test_new_kinds_round_trip_through_json():
    facts = (Fact("host", "eu-west-1"), Fact("version", "v2.3.1"), Fact("name", "Dev Patel"), Fact("date", "14 March"))
    assert facts_from_json(facts_to_json(facts)) == facts
    assert facts_from_json([["region", "eu-west-1"]]) == ()


def test_the_cap_holds_with_every_kind_at_once():
    text = " ".join(f"host-a-{n} v1.{n}.0 ticket-x-{n}.py" for n in range(300))
    assert len(extract_facts([text])) == MAX_FACTS


def test_fast_enough_to_run_on_every_compression():
    texts = [case["text"] for case in CASES] * 3
    started = time.perf_counter()
    extract_facts(texts)
    assert time.perf_counter() - started < 1.0
