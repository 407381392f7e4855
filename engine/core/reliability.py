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

from engine.core.aging import Level

LEVEL_PRIOR_RETENTION = {Level.RECENT: 0.9, Level.OLD: 0.75, Level.ANCIENT: 0.6, Level.ULTRA: 0.45}


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
    """Whole percent, rounding halves up (0.845 -> 85), as the levels' bounds are read; 0-100 whatever the
    score (a stored one outside [0, 1], infinite or NaN reads as its nearest bound, 0 for NaN), so a page
    never fails on one."""
    if math.isnan(score):
        return 0
    return math.floor(min(1.0, max(0.0, score)) * 100 + 0.5)


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


@dataclass(frozen=True)
class SizeBand:
    """One of the spec's "Compression Quality by Model Size" bands and the compressions it recommends at most."""

    name: str
    sizes: str
    recommend: str
    warn_after: int


# The spec's bands, smallest first. The warning starts at the lower end of each recommended
# range (2, 3, 5): the user hears of it once the conversation is within the range the spec
# gives as the most to make, not only past it.
SMALL_MODELS = SizeBand("Small", "3B-7B", "2-3 compressions max", warn_after=2)
MEDIUM_MODELS = SizeBand("Medium", "13B-30B", "3-5 compressions", warn_after=3)
LARGE_MODELS = SizeBand("Large", "70B+", "5-7 compressions", warn_after=5)
# The lowest size of each band but the first; a size between two bands (8B-12B, 31B-69B)
# belongs to the smaller one, as the spec's model factor groups them (below 13B counts as
# 7B, below 70B as 30B). Below 3B and unknown sizes count as small, the cautious choice,
# as the model factor counts an unknown size as the smallest.
MEDIUM_MODEL_MIN_B = 13.0
LARGE_MODEL_MIN_B = 70.0

WARNING_HEADING = "Context Compression Warning"
RECOMMENDATIONS = (
    "Continue if making good progress",
    "Start new conversation if seeing hallucinations",
    "Use larger model for complex long-term tasks",
)


def size_band(parameter_size_b: float | None) -> SizeBand:
    """The spec's band of a model of ``parameter_size_b`` billion parameters (None: unknown)."""
    size = parameter_size_b or 0.0
    if size >= LARGE_MODEL_MIN_B:
        return LARGE_MODELS
    if size >= MEDIUM_MODEL_MIN_B:
        return MEDIUM_MODELS
    return SMALL_MODELS


@dataclass(frozen=True)
class CompressionWarning:
    """The spec's "Warning for Low Reliability" in parts, so a page can set its own icon
    before ``WARNING_HEADING`` rather than the spec's emoji; ``lines`` are its sentences."""

    lines: tuple[str, ...]
    recommendations: tuple[str, ...]
    band: SizeBand


def low_reliability_warning(
    *, model: str, parameter_size_b: float | None, compression_count: int
) -> CompressionWarning | None:
    """The spec's warning once the conversation has been compressed as often as its model's
    size band recommends at most (``size_band``: from 2 times for small models, 3 for medium,
    5 for large); None before."""
    band = size_band(parameter_size_b)
    if compression_count < band.warn_after:
        return None
    return CompressionWarning(
        lines=(
            f"Your model ({model}) has compressed the conversation {compression_count} times.",
            f"{band.name} models may lose context accuracy after multiple compressions.",
            f"Recommend: {band.recommend} ({band.name.lower()} models, {band.sizes}).",
        ),
        recommendations=RECOMMENDATIONS,
        band=band,
    )


_SIZE_IN_TAG = re.compile(r"(?:^|[:\-_/])(\d+(?:\.\d+)?)\s*([bm])(?:$|[\-_.:])", re.I)


def parameter_size_from_tag(model: str) -> float | None:
    """Billions of parameters read off a model tag (``llama3.2:3b`` -> 3.0, ``smollm2-135m`` -> 0.135)."""
    match = _SIZE_IN_TAG.search(model)
    if match is None:
        return None
    value = float(match.group(1))
    return value if match.group(2).lower() == "b" else value / 1000


# Under this many billions of parameters a model's summaries are mostly filler (SmolLM2-135M
# copies the prompt's scaffolding and invents the rest, and never keeps more facts than the
# extract): it is not asked for any, its checkpoints are the extract.
SMALL_MODEL_MAX_B = 1.0


def is_small_model(parameter_size_b: float | None) -> bool:
    """Whether a model of ``parameter_size_b`` billions (None: unknown) is a small one."""
    return parameter_size_b is not None and parameter_size_b < SMALL_MODEL_MAX_B
