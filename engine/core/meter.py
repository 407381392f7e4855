"""The context meter: how the next prompt fills the context, as bar segments.

Pure arithmetic for the dashboard's bar; widths are percentages of
``max_tokens`` and never add up to more than 100, even when a prompt over
the limit has to be drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.budget import Budget


@dataclass(frozen=True)
class MeterSegment:
    kind: str
    label: str
    tokens: int
    percent: float


@dataclass(frozen=True)
class Meter:
    segments: tuple[MeterSegment, ...]
    used: int
    max_tokens: int
    trigger_percent: float
    usage_percent: int
    # How full the whole context is (system prompt and checkpoints included), as a share of max_tokens.
    filled_percent: int

    @property
    def over_trigger(self) -> bool:
        return self.usage_percent >= 80


def _percent(tokens: int, whole: int) -> float:
    return round(100 * tokens / whole, 2) if whole > 0 else 0.0


def build_meter(budget: Budget, parts: Sequence[tuple[str, str, int]]) -> Meter:
    """``parts`` are ``(kind, label, tokens)`` in prompt order (system, goal, checkpoints, user,
    assistant); a "free" segment fills the rest. The trigger line sits where the active
    conversation reaches 80% of what the system prompt and checkpoints leave."""
    whole = max(budget.max_tokens, sum(tokens for _, _, tokens in parts), 1)
    segments = [MeterSegment(kind, label, tokens, _percent(tokens, whole)) for kind, label, tokens in parts]
    free = max(0, budget.max_tokens - sum(tokens for _, _, tokens in parts))
    segments.append(MeterSegment("free", "free", free, _percent(free, whole)))
    fixed = budget.max_tokens - budget.available
    return Meter(
        segments=tuple(segments),
        used=budget.used,
        max_tokens=budget.max_tokens,
        trigger_percent=_percent(fixed + budget.trigger_at, whole),
        usage_percent=round(100 * budget.usage_of_available),
        filled_percent=round(100 * budget.used / budget.max_tokens) if budget.max_tokens > 0 else 100,
    )
