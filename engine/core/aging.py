"""Checkpoint aging.

A new checkpoint is level 3 (recent) with a target of ``summary_max_tokens``.
At every later compression each existing checkpoint steps down one level and is
compressed to the spec's share of its current size: to 60% into level 2 (old),
to 50% into level 1 (ancient), to 40% into the ultra checkpoint, never above the
level's own target (60%, 30% and 12% of ``summary_max_tokens``: 1,024 -> 614 ->
307 -> 122 by default, the spec's ~600/~300/~150). All ultra checkpoints merge
into one, at 40% of what merges. A tier keeps at most ``max_checkpoints`` non-ultra checkpoints; beyond
that the oldest merge into the ultra checkpoint too. A tier that keeps none
rolls the context over instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum


class Level(IntEnum):
    ULTRA = 0
    ANCIENT = 1
    OLD = 2
    RECENT = 3

    @property
    def label(self) -> str:
        return {0: "ultra", 1: "ancient", 2: "old", 3: "recent"}[self.value]

    @property
    def display(self) -> str:
        """How a level is named to users, everywhere: "level 3 (recent)" down to "ultra"."""
        return "ultra" if self is Level.ULTRA else f"level {self.value} ({self.label})"

    def aged(self) -> Level:
        return Level(max(self.value - 1, Level.ULTRA))


MIN_TARGET_TOKENS = 16

# The spec's "Compress to 60%" (3 -> 2), "to 50%" (2 -> 1) and "to 40%" (1 -> ultra):
# the share of its size a checkpoint keeps when it steps down into the level.
STEP_SHARE = {Level.OLD: 0.6, Level.ANCIENT: 0.5, Level.ULTRA: 0.4}


def level_target(level: Level, summary_max_tokens: int) -> int:
    """The token target of a level: ``summary_max_tokens`` times the step shares down to it."""
    target = float(summary_max_tokens)
    for below in (Level.OLD, Level.ANCIENT, Level.ULTRA):
        if below >= level:
            target *= STEP_SHARE[below]
    return max(MIN_TARGET_TOKENS, int(target))


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint of the active context, oldest first in any sequence."""

    id: int
    level: Level
    tokens: int


@dataclass(frozen=True)
class AgingStep:
    checkpoint_id: int
    from_level: Level
    to_level: Level
    target_tokens: int


@dataclass(frozen=True)
class MergeStep:
    """Checkpoints (oldest first) that become the single ultra checkpoint."""

    checkpoint_ids: tuple[int, ...]
    target_tokens: int


@dataclass(frozen=True)
class AgingPlan:
    steps: tuple[AgingStep, ...]
    merge: MergeStep | None
    rollover: bool


def aged_target(info: CheckpointInfo, summary_max_tokens: int) -> int:
    """The next level's share of the current size, never above that level's target."""
    to_level = info.level.aged()
    share = int(info.tokens * STEP_SHARE[to_level])
    return max(MIN_TARGET_TOKENS, min(level_target(to_level, summary_max_tokens), share))


def plan_aging(checkpoints: Sequence[CheckpointInfo], *, summary_max_tokens: int, max_checkpoints: int) -> AgingPlan:
    """What happens to the existing checkpoints when one more compression creates a new level-3 checkpoint."""
    if max_checkpoints == 0:
        return AgingPlan(steps=(), merge=None, rollover=True)

    steps = [
        AgingStep(
            checkpoint_id=info.id,
            from_level=info.level,
            to_level=info.level.aged(),
            target_tokens=aged_target(info, summary_max_tokens),
        )
        for info in checkpoints
        if info.level != Level.ULTRA
    ]
    # The new checkpoint takes one of the tier's slots.
    survivors = [step for step in steps if step.to_level != Level.ULTRA]
    overflow = max(0, len(survivors) + 1 - max_checkpoints)
    newly_ultra = {step.checkpoint_id for step in survivors[:overflow]}
    newly_ultra |= {step.checkpoint_id for step in steps if step.to_level == Level.ULTRA}
    # An existing ultra checkpoint is only re-merged when something joins it.
    to_merge_ids = newly_ultra | {info.id for info in checkpoints if info.level == Level.ULTRA and newly_ultra}

    merge = None
    if newly_ultra:
        merged = [info for info in checkpoints if info.id in to_merge_ids]
        # "Checkpoint 1 -> Ultra-compress: compress to 40%", of all that merges.
        share = int(sum(info.tokens for info in merged) * STEP_SHARE[Level.ULTRA])
        merge = MergeStep(
            checkpoint_ids=tuple(info.id for info in merged),
            target_tokens=max(MIN_TARGET_TOKENS, min(level_target(Level.ULTRA, summary_max_tokens), share)),
        )
    kept_steps = tuple(step for step in steps if step.checkpoint_id not in to_merge_ids)
    return AgingPlan(steps=kept_steps, merge=merge, rollover=False)
