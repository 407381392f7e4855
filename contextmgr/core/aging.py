"""Checkpoint aging.

A new checkpoint is level 3 (recent) with a target of ``summary_max_tokens``.
At every later compression each existing checkpoint steps down one level with
its token target halved: 3 -> 2 (old) -> 1 (ancient) -> ultra, and all ultra
checkpoints merge into one. A tier keeps at most ``max_checkpoints`` non-ultra
checkpoints; beyond that the oldest merge into the ultra checkpoint too. A tier
that keeps none rolls the context over instead.
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


def level_target(level: Level, summary_max_tokens: int) -> int:
    """The token target of a level: ``summary_max_tokens`` halved once per step below recent."""
    return max(MIN_TARGET_TOKENS, summary_max_tokens >> (Level.RECENT - level))


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
    """Half the current size, never above the next level's target."""
    return max(MIN_TARGET_TOKENS, min(level_target(info.level.aged(), summary_max_tokens), info.tokens // 2))


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
        merge = MergeStep(
            checkpoint_ids=tuple(info.id for info in checkpoints if info.id in to_merge_ids),
            target_tokens=level_target(Level.ULTRA, summary_max_tokens),
        )
    kept_steps = tuple(step for step in steps if step.checkpoint_id not in to_merge_ids)
    return AgingPlan(steps=kept_steps, merge=merge, rollover=False)
