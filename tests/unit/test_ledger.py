from __future__ import annotations

from contextmgr.core.aging import Level
from contextmgr.core.ledger import Ledger, build_ledger, ledger_budget, render_ledger
from contextmgr.core.retention import Fact
from contextmgr.core.window import CheckpointView, render_checkpoint
from contextmgr.resources import context_profile


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


def test_over_its_share_the_policy_keeps_decisions_then_paths_and_drops_the_oldest_of_a_kind():
    facts = (
        Fact("number", "10 kg"),
        Fact("number", "20 kg"),
        Fact("path", "/srv/app/data"),
        Fact("decision", "use PostgreSQL"),
        Fact("number", "30 kg"),
    )
    # "Facts:" costs 1, "use PostgreSQL;" 2, "/srv/app/data;" 1, each "N kg;" 2: room for one figure.
    ledger = build_ledger(facts, budget_tokens=6, cost=words)
    assert [f.text for f in ledger.entries] == ["/srv/app/data", "use PostgreSQL", "30 kg"]
    assert [f.text for f in ledger.dropped] == ["10 kg", "20 kg"]


def test_facts_of_locked_decisions_go_first_and_unknown_kinds_last():
    facts = (Fact("decision", "use MySQL"), Fact("other", "misc"), Fact("host", "eu-west-1"))  # type: ignore[arg-type]
    ledger = build_ledger(facts, budget_tokens=2, cost=words, locked_decisions=["Deploy to EU-WEST-1 only"])
    assert [f.text for f in ledger.entries] == ["eu-west-1"]
    assert [f.text for f in ledger.dropped] == ["use MySQL", "misc"]


def test_a_fact_is_written_once_and_not_when_the_structured_fields_show_it():
    facts = (Fact("path", "src/a.py"), Fact("path", "SRC/A.PY"), Fact("code", "`run_all`"), Fact("url", "https://x.io"))
    ledger = build_ledger(facts, budget_tokens=100, cost=words, already_shown="Files: src/a.py")
    assert [f.text for f in ledger.entries] == ["`run_all`", "https://x.io"]


def test_a_fact_inside_a_kept_one_is_not_written_again():
    facts = (Fact("name", "Maria"), Fact("name", "Maria Lopez"), Fact("host", "eu-west-1"))
    ledger = build_ledger(facts, budget_tokens=100, cost=words)
    assert [f.text for f in ledger.entries] == ["Maria Lopez", "eu-west-1"]
    assert ledger.dropped == ()


def test_each_tier_states_its_share_split_over_the_checkpoints_it_keeps():
    # 2K: Tier 1, one ultra checkpoint, 12% of 1,700; 8K and 16K: three checkpoints and the ultra one,
    # 12% of 6,800 and 6% of 13,600.
    assert ledger_budget(max_tokens=1700, tier=context_profile(2048).tier) == 204
    assert ledger_budget(max_tokens=13600, tier=context_profile(16384).tier) == 204
    assert ledger_budget(max_tokens=6800, tier=context_profile(8192).tier) == 204


def test_the_ledger_reaches_the_prompt_with_its_checkpoint():
    view = CheckpointView(
        number=1, level=Level.ULTRA, range_label="Messages 1-9", summary="Talked.", ledger=("eu-west-1", "/srv")
    )
    assert render_checkpoint(view).endswith("\nFacts: eu-west-1; /srv")
