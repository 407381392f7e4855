from __future__ import annotations

from engine.core.budget import Budget
from engine.core.meter import build_meter


def test_segments_are_shares_of_the_context_and_free_fills_the_rest():
    budget = Budget(max_tokens=1000, system_prompt_tokens=100, checkpoint_tokens=200, active_tokens=300)
    meter = build_meter(
        budget,
        [
            ("system", "system", 100),
            ("checkpoints", "checkpoints", 200),
            ("user", "user", 120),
            ("assistant", "assistant", 180),
        ],
    )
    assert [(s.kind, s.percent) for s in meter.segments] == [
        ("system", 10.0),
        ("checkpoints", 20.0),
        ("user", 12.0),
        ("assistant", 18.0),
        ("free", 40.0),
    ]
    # available 700, trigger at 560 active tokens: 300 fixed + 560 = 86% of the context.
    assert meter.trigger_percent == 86.0
    assert (meter.used, meter.usage_percent, meter.over_trigger) == (600, 43, False)
    assert meter.filled_percent == 60


def test_a_session_that_starts_with_a_carried_checkpoint_shows_how_full_it_is():
    budget = Budget(max_tokens=1700, system_prompt_tokens=40, checkpoint_tokens=300, active_tokens=0)
    meter = build_meter(budget, [("system", "system", 40), ("checkpoints", "checkpoints", 300)])
    assert (meter.filled_percent, meter.usage_percent) == (20, 0)


def test_a_prompt_over_the_limit_still_draws_within_the_bar():
    budget = Budget(max_tokens=100, system_prompt_tokens=50, checkpoint_tokens=0, active_tokens=100)
    meter = build_meter(budget, [("system", "system", 50), ("user", "user", 100)])
    assert sum(s.percent for s in meter.segments) <= 100.0
    assert meter.segments[-1].tokens == 0
    assert meter.over_trigger


def test_an_empty_context_has_no_division_by_zero():
    meter = build_meter(Budget(max_tokens=0, system_prompt_tokens=0, checkpoint_tokens=0, active_tokens=0), [])
    assert meter.segments[0].percent == 0.0
    assert meter.filled_percent == 100
