from datetime import date

import pytest

from engine.core.ledger import build_ledger, render_ledger
from engine.core.retention import Fact
from engine.core.salience import Said, said_clauses, said_header, salience_order, small_talk, split_said


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize(
    "clause",
    ["Hey Mel!", "Thanks so much!", "Haha, that's great!", "Wow, that's cool, Mel!", "How was your weekend?",
     "Congrats!", "I agree.", "It was so much fun!", "Sounds good, talk soon"],
)  # fmt: skip
def test_greetings_thanks_reactions_and_questions_are_small_talk(clause):
    assert small_talk(clause)


@pytest.mark.parametrize(
    "clause",
    ["My sister Ana is a nurse in Leeds.", "we moved from leeds in march", "I was diagnosed with asthma",
     "Thanks for the tip, I finally read The Night Circus and loved it"],
)  # fmt: skip
def test_what_people_say_about_themselves_is_not(clause):
    assert not small_talk(clause)


def test_said_clauses_say_when_and_by_whom_and_leave_small_talk_out():
    facts = said_clauses(
        [
            Said("user", "Hey Mel! We adopted a beagle called Biscuit last Saturday. How are you?", date(2023, 5, 25)),
            Said("assistant", "Congrats! Use port 5432.", None),
            Said("", "The summary names Leeds and the new flat."),
            Said("user", "[DECISION] Use JWT - LOCKED", date(2023, 5, 25)),
        ]
    )
    assert [fact.text for fact in facts] == [
        "[25 May 2023, user] We adopted a beagle called Biscuit last Saturday (20 May 2023).",
        "[assistant] Use port 5432.",
        "The summary names Leeds and the new flat.",
    ]
    assert split_said(facts[0].text) == (
        "25 May 2023, user",
        "We adopted a beagle called Biscuit last Saturday (20 May 2023).",
    )
    assert split_said("no header") == (None, "no header")
    assert said_header("", None) == ""


def test_the_same_clause_said_twice_is_kept_once():
    facts = said_clauses([Said("user", "My dog is called Biscuit."), Said("user", "My dog is called  biscuit.")])
    assert len(facts) == 1


def test_rare_and_new_words_go_first_for_what_they_cost():
    facts = [
        Fact("clause", "[user] The weather was nice and the weather was warm"),
        Fact("clause", "[user] The weather was warm again"),
        Fact("clause", "[assistant] Biscuit the beagle came from Dublin"),
        Fact("clause", "[user] The weather was nice"),
    ]
    order = salience_order(facts, cost=words)
    assert order[0] == 2  # rare words, a name
    # Once one clause about the weather is kept, another about it says less than its cost.
    assert order.index(3) < order.index(0)
    assert sorted(order) == [0, 1, 2, 3]


def test_what_the_context_still_says_is_no_news():
    facts = [
        Fact("clause", "[user] Biscuit the beagle came from Dublin"),
        Fact("clause", "[user] My sister Ana moved to Lisbon"),
    ]
    # The newest messages, which stay in the context, talk about Ana in Lisbon: the beagle goes first.
    assert salience_order(facts, cost=words, beside="Ana sent photos of Lisbon") == [0, 1]
    assert salience_order(facts, cost=words, beside="How is Biscuit? Still missing Dublin?") == [1, 0]
    ledger = build_ledger(facts, budget_tokens=10, cost=words, beside="How is Biscuit? Still missing Dublin?")
    assert ledger.entries == (facts[1],)


def test_how_things_usually_go_ranks_after_what_happened_unless_it_holds_a_value():
    facts = [
        Fact("clause", "[assistant] Such claims often settle without litigation"),
        Fact("clause", "[assistant] The supply line failed at the crimp"),
        Fact("clause", "[assistant] Refunds usually take 14 days"),
    ]
    # The same number of words each, every word rare: the general statement alone weighs less.
    assert salience_order(facts, cost=words)[-1] == 0
    general = salience_order(facts[:1] + facts[2:], cost=words)
    assert general == [1, 0], "a general clause with a value of its own is not held back"


def test_what_comes_first_leads_whatever_its_score():
    facts = [Fact("clause", "Biscuit came from Dublin"), Fact("clause", "we chose Postgres")]
    assert salience_order(facts, cost=words, first=lambda fact: "Postgres" in fact.text) == [1, 0]


def test_a_locked_decision_leads_the_ledger_and_headers_are_paid_once():
    facts = [
        Fact("clause", "[1 May 2023, user] Biscuit came from Dublin"),
        Fact("clause", "[1 May 2023, user] my sister Ana is a nurse"),
        Fact("clause", "[2 May 2023, assistant] we chose Postgres for the shop"),
    ]
    ledger = build_ledger(facts, budget_tokens=30, cost=words, locked_decisions=["We chose Postgres for the shop"])
    assert ledger.entries == tuple(facts)
    assert render_ledger(fact.text for fact in ledger.entries) == (
        "Facts:\n1 May 2023, user: Biscuit came from Dublin; my sister Ana is a nurse\n"
        "2 May 2023, assistant: we chose Postgres for the shop"
    )
    tight = build_ledger(facts, budget_tokens=12, cost=words, locked_decisions=["We chose Postgres for the shop"])
    assert tight.entries == (facts[2],)


def test_entries_with_and_without_headers_render_each_on_its_line():
    assert render_ledger(["[1 May 2023, user] a", "b"]) == "Facts:\n1 May 2023, user: a\nb"
    assert render_ledger(["a", "b"]) == "Facts: a; b"
    assert render_ledger([]) == ""
