from __future__ import annotations

import pytest

from engine.core.aging import AgingStep, CheckpointInfo, Level, MergeStep, level_target, plan_aging


def cp(id_, level, tokens):
    return CheckpointInfo(id=id_, level=level, tokens=tokens)


def test_levels_and_labels():
    assert [level.label for level in Level] == ["ultra", "ancient", "old", "recent"]
    assert Level.RECENT.aged() == Level.OLD
    assert Level.ULTRA.aged() == Level.ULTRA


def test_level_targets_follow_the_specs_step_shares():
    """60% into level 2, then 50%, then 40%: 1,024 -> 614 -> 307 -> 122."""
    assert [level_target(level, 1024) for level in (Level.RECENT, Level.OLD, Level.ANCIENT, Level.ULTRA)] == [
        1024,
        614,
        307,
        122,
    ]
    assert [level_target(level, 1200) for level in (Level.OLD, Level.ANCIENT, Level.ULTRA)] == [720, 360, 144]
    assert level_target(Level.ULTRA, 40) == 16


def test_first_compression_has_nothing_to_age():
    assert plan_aging([], summary_max_tokens=1024, max_checkpoints=3) == plan_aging(
        [], summary_max_tokens=1024, max_checkpoints=3
    )
    plan = plan_aging([], summary_max_tokens=1024, max_checkpoints=3)
    assert plan.steps == ()
    assert plan.merge is None
    assert not plan.rollover


def test_each_step_keeps_its_share_of_the_current_size():
    # Second compression: a 1,000-token checkpoint becomes old at 60%.
    plan = plan_aging([cp(1, Level.RECENT, 1000)], summary_max_tokens=1024, max_checkpoints=3)
    assert plan.steps == (AgingStep(1, Level.RECENT, Level.OLD, 600),)
    # Third: 600 -> ancient at 50%, a new 900 -> old at 60%.
    plan = plan_aging([cp(1, Level.OLD, 600), cp(2, Level.RECENT, 900)], summary_max_tokens=1024, max_checkpoints=3)
    assert plan.steps == (AgingStep(1, Level.OLD, Level.ANCIENT, 300), AgingStep(2, Level.RECENT, Level.OLD, 540))
    assert plan.merge is None


def test_a_step_never_exceeds_the_levels_target():
    # A checkpoint over its target (an import, a changed summary_max_tokens) ages to the level's target.
    plan = plan_aging([cp(1, Level.OLD, 1000), cp(2, Level.RECENT, 1500)], summary_max_tokens=1024, max_checkpoints=3)
    assert plan.steps == (AgingStep(1, Level.OLD, Level.ANCIENT, 307), AgingStep(2, Level.RECENT, Level.OLD, 614))


def test_ancient_becomes_ultra_through_a_merge():
    checkpoints = [cp(1, Level.ANCIENT, 300), cp(2, Level.OLD, 600), cp(3, Level.RECENT, 1200)]
    plan = plan_aging(checkpoints, summary_max_tokens=1024, max_checkpoints=3)
    assert plan.steps == (AgingStep(2, Level.OLD, Level.ANCIENT, 300), AgingStep(3, Level.RECENT, Level.OLD, 614))
    assert plan.merge == MergeStep(checkpoint_ids=(1,), target_tokens=120), "40% of 300"


def test_all_ultra_checkpoints_merge_into_one():
    checkpoints = [cp(1, Level.ULTRA, 128), cp(2, Level.ANCIENT, 250), cp(3, Level.OLD, 500), cp(4, Level.RECENT, 1000)]
    plan = plan_aging(checkpoints, summary_max_tokens=1024, max_checkpoints=3)
    assert plan.merge == MergeStep(checkpoint_ids=(1, 2), target_tokens=122)
    assert [step.checkpoint_id for step in plan.steps] == [3, 4]


def test_a_lone_ultra_checkpoint_is_not_re_merged():
    plan = plan_aging([cp(1, Level.ULTRA, 128), cp(2, Level.RECENT, 1000)], summary_max_tokens=1024, max_checkpoints=3)
    assert plan.merge is None
    assert plan.steps == (AgingStep(2, Level.RECENT, Level.OLD, 600),)


def test_a_tier_keeping_one_checkpoint_merges_the_rest():
    plan = plan_aging([cp(1, Level.RECENT, 1000)], summary_max_tokens=1024, max_checkpoints=1)
    assert plan.steps == ()
    assert plan.merge == MergeStep(checkpoint_ids=(1,), target_tokens=122)


def test_tier_one_rolls_over():
    plan = plan_aging([cp(1, Level.RECENT, 1000)], summary_max_tokens=1024, max_checkpoints=0)
    assert plan.rollover
    assert plan.steps == ()


def test_small_checkpoints_still_shrink_but_not_below_the_floor():
    plan = plan_aging([cp(1, Level.RECENT, 20)], summary_max_tokens=1024, max_checkpoints=3)
    assert plan.steps[0].target_tokens == 16


@pytest.mark.parametrize("count", [1, 3, 8, 20])
def test_never_more_non_ultra_checkpoints_than_the_tier_allows(count):
    levels = [Level.RECENT, Level.OLD, Level.ANCIENT]
    checkpoints = [cp(i, levels[min(count - 1 - i, 2)], 100) for i in range(count)]
    plan = plan_aging(checkpoints, summary_max_tokens=1024, max_checkpoints=3)
    survivors = [s for s in plan.steps if s.to_level != Level.ULTRA]
    assert len(survivors) + 1 <= 3


def test_every_level_has_one_name_for_users():
    assert [level.display for level in Level] == ["ultra", "level 1 (ancient)", "level 2 (old)", "level 3 (recent)"]


def test_a_tier_keeping_three_shows_every_level_before_ultra():
    """Four compressions at Tier 2 (8K): the first checkpoint goes 3 -> 2 -> 1 -> ultra, one level each."""
    checkpoints: list[CheckpointInfo] = []
    first_levels = []
    for number in range(1, 5):
        plan = plan_aging(checkpoints, summary_max_tokens=1024, max_checkpoints=3)
        merged = set(plan.merge.checkpoint_ids) if plan.merge else set()
        steps = {step.checkpoint_id: step for step in plan.steps}
        aged = [cp(c.id, steps[c.id].to_level, steps[c.id].target_tokens) for c in checkpoints if c.id in steps]
        ultra = [cp(min(merged), Level.ULTRA, plan.merge.target_tokens)] if plan.merge else []
        kept = [c for c in checkpoints if c.level == Level.ULTRA and c.id not in merged]
        checkpoints = [*sorted(kept + ultra + aged, key=lambda c: c.id), cp(number, Level.RECENT, 1000)]
        first_levels.append(checkpoints[0].level)
    assert first_levels == [Level.RECENT, Level.OLD, Level.ANCIENT, Level.ULTRA]
    assert [c.level for c in checkpoints] == [Level.ULTRA, Level.ANCIENT, Level.OLD, Level.RECENT]
