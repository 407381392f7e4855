"""The dynamic budget of the spec.

``available = max_tokens - system_prompt_tokens - checkpoint_tokens`` and a
compression is due when the active (uncompressed) conversation reaches 80% of
``available``. Integer arithmetic with an exact ratio keeps the spec's worked
example exact (10,080 / 8,320 / 8,640 / 8,400), with no float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

COMPRESSION_TRIGGER_RATIO = Fraction(4, 5)
# How full a compression leaves the prompt: memory (checkpoints and ledgers) and the newest
# messages take about this share of the context, so the room up to the trigger is the next turns'.
TARGET_FILL = Fraction(3, 5)
# A compression must make what it replaces at least this much smaller, or it is not committed.
MIN_SHRINK = Fraction(3, 10)
# The reply reserve: the fewest tokens a reply must have room for. A prompt that leaves less
# waits for (or runs) a compression, and a compression that leaves less rolls over.
REPLY_MIN_TOKENS = 32


@dataclass(frozen=True)
class Budget:
    max_tokens: int
    system_prompt_tokens: int
    checkpoint_tokens: int
    active_tokens: int

    @property
    def available(self) -> int:
        return self.max_tokens - self.system_prompt_tokens - self.checkpoint_tokens

    @property
    def trigger_at(self) -> int:
        return int(self.available * COMPRESSION_TRIGGER_RATIO)

    @property
    def used(self) -> int:
        """Every token the next prompt holds before a reply: system, checkpoints and active messages."""
        return self.system_prompt_tokens + self.checkpoint_tokens + self.active_tokens

    @property
    def free(self) -> int:
        return max(0, self.max_tokens - self.used)

    @property
    def compression_due(self) -> bool:
        return self.active_tokens >= self.trigger_at

    @property
    def usage_of_available(self) -> float:
        """Share of the available budget the active conversation uses (1.0 = full)."""
        if self.available <= 0:
            return 1.0
        return self.active_tokens / self.available

    def fits(self, extra_tokens: int) -> bool:
        """Whether ``extra_tokens`` more still fit under ``max_tokens``."""
        return self.used + extra_tokens <= self.max_tokens


def compute_budget(
    *,
    max_tokens: int,
    system_prompt_tokens: int,
    checkpoint_tokens: Iterable[int],
    active_tokens: int,
) -> Budget:
    return Budget(
        max_tokens=max_tokens,
        system_prompt_tokens=system_prompt_tokens,
        checkpoint_tokens=sum(checkpoint_tokens),
        active_tokens=active_tokens,
    )


def prompt_room(num_ctx: int, *, reply_tokens: int = 0, reply_min: int = REPLY_MIN_TOKENS) -> int:
    """The most tokens a prompt may take in a context of ``num_ctx``: what is left once the reply
    reserve is held back, that is ``reply_tokens`` asked for and the ``reply_min`` any reply needs."""
    return num_ctx - reply_tokens - reply_min


def shrink_shortfall(*, before_tokens: int, after_tokens: int) -> str | None:
    """Why a compression that turns ``before_tokens`` into ``after_tokens`` frees too little
    room to commit (``MIN_SHRINK``), or None when it frees enough."""
    if after_tokens <= before_tokens * (1 - MIN_SHRINK):
        return None
    freed = max(Fraction(before_tokens - after_tokens, before_tokens), Fraction(0)) if before_tokens else Fraction(0)
    needed = f"{float(MIN_SHRINK):.0%}"
    shown = f"{float(freed):.0%}"
    if shown == needed:
        # Rounded up to the share it falls short of (29.9% as "30%"): a tenth of a percent, rounded down, says
        # less than MIN_SHRINK (a whole percentage), as the comparison above found.
        shown = f"{math.floor(freed * 1000) / 10}%"
    return f"it would turn {before_tokens:,} tokens into {after_tokens:,}: {shown} freed, {needed} needed"
