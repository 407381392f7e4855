"""The spec's worked example (16K, Tier 3), number by number.

The spec's "After 1st Compression" box says 10,400 available / 8,320 trigger
for one 1,200-token checkpoint, but its own formula gives
13,600 - 1,000 - 1,200 = 11,400 (trigger 9,120); the other three boxes agree
with the formula. The product follows the formula (docs/conformance.md, "Differences from
the spec"), and this test pins both the formula's figure and the arithmetic
slip, so a change to either is noticed.
"""

from __future__ import annotations

import pytest

from engine.core.budget import REPLY_MIN_TOKENS, Budget, compute_budget, prompt_room, shrink_shortfall


@pytest.mark.parametrize(
    ("checkpoints", "available", "trigger"),
    [
        ([], 12_600, 10_080),
        ([1_200], 11_400, 9_120),
        ([600, 1_200], 10_800, 8_640),
        ([300, 600, 1_200], 10_500, 8_400),
    ],
)
def test_worked_example(checkpoints, available, trigger):
    budget = compute_budget(
        max_tokens=13_600, system_prompt_tokens=1_000, checkpoint_tokens=checkpoints, active_tokens=0
    )
    assert budget.available == available
    assert budget.trigger_at == trigger


def test_the_specs_first_compression_box_is_an_arithmetic_slip():
    # 10,400 / 8,320 would need a 2,200-token checkpoint; 8,320 is 80% of 10,400.
    slip = compute_budget(max_tokens=13_600, system_prompt_tokens=1_000, checkpoint_tokens=[2_200], active_tokens=0)
    assert (slip.available, slip.trigger_at) == (10_400, 8_320)


def test_compression_is_due_exactly_at_the_trigger():
    below = Budget(max_tokens=13_600, system_prompt_tokens=1_000, checkpoint_tokens=0, active_tokens=10_079)
    at = Budget(max_tokens=13_600, system_prompt_tokens=1_000, checkpoint_tokens=0, active_tokens=10_080)
    assert not below.compression_due
    assert at.compression_due


def test_used_free_and_fit():
    budget = Budget(max_tokens=13_600, system_prompt_tokens=1_000, checkpoint_tokens=1_200, active_tokens=3_034)
    assert budget.used == 5_234
    assert budget.free == 8_366
    assert budget.fits(8_366)
    assert not budget.fits(8_367)
    assert budget.usage_of_available == pytest.approx(3_034 / 11_400)


def test_exhausted_budget_reports_full_and_no_free_space():
    budget = Budget(max_tokens=1_700, system_prompt_tokens=1_500, checkpoint_tokens=400, active_tokens=10)
    assert budget.available == -200
    assert budget.free == 0
    assert budget.usage_of_available == 1.0
    assert budget.compression_due


def test_the_prompt_room_holds_back_the_reply_reserve():
    assert REPLY_MIN_TOKENS == 32
    assert prompt_room(1_700) == 1_668
    # A summary asked for 283 tokens keeps those and the reserve out of its prompt.
    assert prompt_room(1_700, reply_tokens=283) == 1_700 - 283 - 32
    assert prompt_room(1_700, reply_min=0) == 1_700


def test_a_compression_must_free_thirty_percent_of_what_it_replaces():
    assert shrink_shortfall(before_tokens=1000, after_tokens=700) is None
    assert (
        shrink_shortfall(before_tokens=547, after_tokens=575)
        == "it would turn 547 tokens into 575: 0% freed, 30% needed"
    )
    assert (
        shrink_shortfall(before_tokens=572, after_tokens=567)
        == "it would turn 572 tokens into 567: 1% freed, 30% needed"
    )
    assert shrink_shortfall(before_tokens=0, after_tokens=5) == "it would turn 0 tokens into 5: 0% freed, 30% needed"


@pytest.mark.parametrize(
    ("before", "after", "shares"),
    [
        # 29.9% (and 29.95%) freed is short of the 30% needed: not "30% freed, 30% needed".
        (1000, 701, "29.9% freed, 30% needed"),
        (2000, 1401, "29.9% freed, 30% needed"),
        (1000, 705, "29.5% freed, 30% needed"),
        # A share that does not round to the needed one is a whole percentage, as before.
        (1000, 706, "29% freed, 30% needed"),
    ],
)
def test_a_shortfall_just_under_the_needed_share_does_not_read_as_it(before, after, shares):
    assert shrink_shortfall(before_tokens=before, after_tokens=after) == (
        f"it would turn {before:,} tokens into {after:,}: {shares}"
    )


def test_whatever_the_sizes_the_freed_share_of_a_shortfall_reads_as_less_than_the_needed_one():
    for before in range(1, 1200):
        for after in range(int(before * 0.69), int(before * 0.72) + 2):
            why = shrink_shortfall(before_tokens=before, after_tokens=after)
            if why is not None:
                freed, needed = (float(part.split("%")[0]) for part in why.split(": ")[1].split(", "))
                assert freed < needed, why
