from __future__ import annotations

from engine.core.aging import Level
from engine.core.ledger import Ledger, build_ledger, ledger_budget, memory_budget, render_ledger
from engine.core.retention import Fact
from engine.core.window import CheckpointView, render_checkpoint
from engine.resources import context_profile


def words(text: str) -> int:
    """A stand-in tokenizer: one token per word."""
    return len(text.split())


def test_every_fact_fits_when_there_is_room_and_keeps_its_order():
    facts = (Fact("number", "30 s"), Fact("path", "/srv/app/data"), Fact("host", "eu-west-1"))
    ledger = build_ledger(facts, budget_tokens=100, cost=words)
    assert ledger == Ledger(entries=facts)
    assert render_ledger(f.text for f in ledger.entries) == "Facts: 30 s; /srv/app/data; eu-west-1"


def test_an_empty_ledger_renders_as_nothing():
    assert render_ledger([]) == ""
    assert build_ledger((), budget_tokens=0, cost=words) == Ledger()


def test_over_its_share_the_ledger_keeps_the_clauses_that_say_most_per_token():
    facts = (
        Fact("clause", "the learning rate is 5e-4"),
        Fact("clause", "we talked about the plan at length and agreed it is fine in general for v2"),
        Fact("clause", "batch size 64 on 12 classes"),
    )
    # "Facts:" costs 1; the clauses cost 6, 18 and 7 words (with their separators): room for two.
    ledger = build_ledger(facts, budget_tokens=14, cost=words)
    assert [f.text for f in ledger.entries] == ["the learning rate is 5e-4", "batch size 64 on 12 classes"]
    assert [f.text for f in ledger.dropped] == [facts[1].text]


def test_between_equal_clauses_the_newest_keeps_its_place():
    facts = (Fact("clause", "port 5432 is open"), Fact("clause", "port 6379 is open"))
    ledger = build_ledger(facts, budget_tokens=6, cost=words)
    assert [f.text for f in ledger.entries] == ["port 6379 is open"]
    assert [f.text for f in ledger.dropped] == ["port 5432 is open"]


def test_clauses_of_locked_decisions_go_first():
    facts = (Fact("clause", "We use MySQL 8.0 and Redis 7 with 3 replicas"), Fact("clause", "Deploy to eu-west-1 only"))
    ledger = build_ledger(facts, budget_tokens=6, cost=words, locked_decisions=["Deploy to EU-WEST-1 only"])
    assert [f.text for f in ledger.entries] == ["Deploy to eu-west-1 only"]
    assert [f.text for f in ledger.dropped] == [facts[0].text]


def test_a_fact_is_written_once_and_not_when_the_structured_fields_show_it():
    facts = (Fact("path", "src/a.py"), Fact("path", "SRC/A.PY"), Fact("code", "`run_all`"), Fact("url", "https://x.io"))
    ledger = build_ledger(facts, budget_tokens=100, cost=words, already_shown="Files: src/a.py")
    assert [f.text for f in ledger.entries] == ["`run_all`", "https://x.io"]


def test_a_fact_inside_a_kept_one_is_not_written_again():
    facts = (Fact("name", "Maria"), Fact("name", "Maria Lopez"), Fact("host", "eu-west-1"))
    ledger = build_ledger(facts, budget_tokens=100, cost=words)
    assert [f.text for f in ledger.entries] == ["Maria Lopez", "eu-west-1"]
    assert ledger.dropped == ()


def test_a_fact_found_only_across_two_others_is_kept():
    # "Porto" then "Oslo" read "portooslo" run together: "too" and "toos" are inside neither fact.
    facts = (Fact("name", "Porto"), Fact("name", "Oslo"), Fact("word", "toos"), Fact("word", "rto"))
    ledger = build_ledger(facts, budget_tokens=100, cost=words)
    assert [f.text for f in ledger.entries] == ["Porto", "Oslo", "toos"]
    assert ledger.dropped == ()


def test_each_tier_states_its_memory_split_over_the_checkpoints_it_keeps():
    # 2K: Tier 1, one ultra checkpoint, 50% of 1,700 (its clauses are the whole compressed history);
    # 8K and 16K: three checkpoints and the ultra one, 65% of 6,800 and of 13,600.
    assert memory_budget(max_tokens=1700, tier=context_profile(2048).tier) == 850
    assert ledger_budget(max_tokens=1700, tier=context_profile(2048).tier) == 850
    assert memory_budget(max_tokens=6800, tier=context_profile(8192).tier) == 4420
    assert ledger_budget(max_tokens=6800, tier=context_profile(8192).tier) == 1105
    assert ledger_budget(max_tokens=13600, tier=context_profile(16384).tier) == 2210


def test_the_ledger_reaches_the_prompt_with_its_checkpoint():
    view = CheckpointView(
        number=1, level=Level.ULTRA, range_label="Messages 1-9", summary="Talked.", ledger=("eu-west-1", "/srv")
    )
    assert render_checkpoint(view).endswith("\nFacts: eu-west-1; /srv")
