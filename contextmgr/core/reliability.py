"""Reliability of the compressed context.

The spec: ``score = model_factor * compression_penalty * context_confidence``
with the model factor from the parameter size and a 15% penalty per
compression (never below 0.3). The spec leaves ``context_confidence`` open; here
it is the token-weighted retention of the checkpoints in the active context
(1.0 when there are none). A checkpoint whose retention has not been measured
counts with the prior of its level (``LEVEL_PRIOR_RETENTION``), which assumes
each aging step keeps a little less.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from contextmgr.core.aging import Level

LEVEL_PRIOR_RETENTION = {Level.RECENT: 0.9, Level.OLD: 0.75, Level.ANCIENT: 0.6, Level.ULTRA: 0.45}
SMALL_MODEL_MAX_B = 7.0
WARN_AFTER_COMPRESSIONS = 3


class ReliabilityLevel(Enum):
    HIGH = ("High", "🟢")
    MEDIUM = ("Medium", "🟡")
    LOW = ("Low", "🟠")
    CRITICAL = ("Critical", "🔴")

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def emoji(self) -> str:
        return self.value[1]


@dataclass(frozen=True)
class CheckpointRetention:
    tokens: int
    level: Level
    retention: float | None = None

    @property
    def effective_retention(self) -> float:
        value = LEVEL_PRIOR_RETENTION[self.level] if self.retention is None else self.retention
        return min(1.0, max(0.0, value))


@dataclass(frozen=True)
class Reliability:
    score: float
    model_factor: float
    compression_penalty: float
    context_confidence: float

    @property
    def percent(self) -> int:
        return score_percent(self.score)

    @property
    def level(self) -> ReliabilityLevel:
        return reliability_level(self.score)


def model_factor(parameter_size_b: float | None) -> float:
    size = parameter_size_b or 0.0
    if size >= 70:
        return 0.95
    if size >= 30:
        return 0.85
    if size >= 13:
        return 0.70
    if size >= 7:
        return 0.50
    return 0.30


def compression_penalty(compression_count: int) -> float:
    return max(1.0 - compression_count * 0.15, 0.3)


def context_confidence(checkpoints: Sequence[CheckpointRetention]) -> float:
    total = sum(cp.tokens for cp in checkpoints)
    if total <= 0:
        return 1.0
    return sum(cp.tokens * cp.effective_retention for cp in checkpoints) / total


def compute_reliability(
    *, parameter_size_b: float | None, compression_count: int, checkpoints: Sequence[CheckpointRetention]
) -> Reliability:
    factor = model_factor(parameter_size_b)
    penalty = compression_penalty(compression_count)
    confidence = context_confidence(checkpoints)
    return Reliability(
        score=factor * penalty * confidence,
        model_factor=factor,
        compression_penalty=penalty,
        context_confidence=confidence,
    )


def score_percent(score: float) -> int:
    """Whole percent, rounding halves up (0.845 -> 85), as the levels' bounds are read."""
    return math.floor(score * 100 + 0.5)


# Each level from its lowest whole percent, best first; below the last floor is Critical.
LEVEL_FLOORS = ((ReliabilityLevel.HIGH, 85), (ReliabilityLevel.MEDIUM, 60), (ReliabilityLevel.LOW, 40))


def reliability_level(score: float) -> ReliabilityLevel:
    percent = score_percent(score)
    for level, floor in LEVEL_FLOORS:
        if percent >= floor:
            return level
    return ReliabilityLevel.CRITICAL


def context_line(*, used: int, max_tokens: int, reliability: Reliability, compression_count: int) -> str:
    """The spec's display string: ``Context: 5,234/13,600 🟡 65% (2 compressions)``."""
    noun = "compression" if compression_count == 1 else "compressions"
    return (
        f"Context: {used:,}/{max_tokens:,} {reliability.level.emoji} {reliability.percent}% "
        f"({compression_count} {noun})"
    )


def low_reliability_warning(*, model: str, parameter_size_b: float | None, compression_count: int) -> str | None:
    """The spec's warning once a small model has compressed the conversation three times or more."""
    if compression_count < WARN_AFTER_COMPRESSIONS or (parameter_size_b or 0.0) >= SMALL_MODEL_MAX_B:
        return None
    return (
        "⚠️ Context Compression Warning\n"
        f"Your model ({model}) has compressed the conversation {compression_count} times.\n"
        "Small models may lose context accuracy after multiple compressions.\n\n"
        "Recommendations:\n"
        "- Continue if making good progress\n"
        "- Start new conversation if seeing hallucinations\n"
        "- Use larger model for complex long-term tasks"
    )


_SIZE_IN_TAG = re.compile(r"(?:^|[:\-_/])(\d+(?:\.\d+)?)\s*([bm])(?:$|[\-_.:])", re.I)


def parameter_size_from_tag(model: str) -> float | None:
    """Billions of parameters read off a model tag (``llama3.2:3b`` -> 3.0, ``smollm2-135m`` -> 0.135)."""
    match = _SIZE_IN_TAG.search(model)
    if match is None:
        return None
    value = float(match.group(1))
    return value if match.group(2).lower() == "b" else value / 1000
