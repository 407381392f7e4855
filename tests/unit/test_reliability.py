from __future__ import annotations

import math

import pytest

from engine.core.aging import Level
from engine.core.reliability import (
    LARGE_MODELS,
    MEDIUM_MODELS,
    RECOMMENDATIONS,
    SMALL_MODELS,
    CheckpointRetention,
    Reliability,
    ReliabilityLevel,
    compression_penalty,
    compute_reliability,
    context_confidence,
    context_line,
    is_small_model,
    low_reliability_warning,
    model_factor,
    parameter_size_from_tag,
    reliability_level,
    score_percent,
    size_band,
)


@pytest.mark.parametrize(
    ("size", "factor"),
    [
        (405, 0.95),
        (70, 0.95),
        (69.9, 0.85),
        (30, 0.85),
        (13, 0.70),
        (12.9, 0.50),
        (7, 0.50),
        (6.9, 0.30),
        (3, 0.30),
        (0.135, 0.30),
        (None, 0.30),
    ],
)
def test_model_factor(size, factor):
    assert model_factor(size) == factor


@pytest.mark.parametrize(("count", "penalty"), [(0, 1.0), (1, 0.85), (2, 0.70), (4, 0.40), (5, 0.3), (20, 0.3)])
def test_compression_penalty(count, penalty):
    assert compression_penalty(count) == pytest.approx(penalty)


@pytest.mark.parametrize(
    ("score", "level"),
    [
        (1.0, ReliabilityLevel.HIGH),
        (0.85, ReliabilityLevel.HIGH),
        (0.8449, ReliabilityLevel.MEDIUM),
        (0.60, ReliabilityLevel.MEDIUM),
        (0.59, ReliabilityLevel.LOW),
        (0.40, ReliabilityLevel.LOW),
        (0.39, ReliabilityLevel.CRITICAL),
        (0.0, ReliabilityLevel.CRITICAL),
    ],
)
def test_levels(score, level):
    assert reliability_level(score) is level


def test_level_labels_and_colours():
    assert [(lvl.label, lvl.emoji) for lvl in ReliabilityLevel] == [
        ("High", "🟢"),
        ("Medium", "🟡"),
        ("Low", "🟠"),
        ("Critical", "🔴"),
    ]


def test_confidence_is_token_weighted_retention_with_level_priors():
    assert context_confidence([]) == 1.0
    assert context_confidence([CheckpointRetention(0, Level.RECENT)]) == 1.0
    measured = [CheckpointRetention(300, Level.RECENT, 1.0), CheckpointRetention(100, Level.OLD, 0.2)]
    assert context_confidence(measured) == pytest.approx((300 * 1.0 + 100 * 0.2) / 400)
    priors = [CheckpointRetention(100, Level.RECENT), CheckpointRetention(100, Level.ULTRA)]
    assert context_confidence(priors) == pytest.approx((0.9 + 0.45) / 2)
    assert CheckpointRetention(10, Level.OLD, 1.7).effective_retention == 1.0
    assert CheckpointRetention(10, Level.OLD, -1).effective_retention == 0.0


def test_score_is_the_product():
    result = compute_reliability(
        parameter_size_b=13, compression_count=1, checkpoints=[CheckpointRetention(10, Level.RECENT, 0.8)]
    )
    assert result.score == pytest.approx(0.70 * 0.85 * 0.8)
    assert result.percent == 48
    assert result.level is ReliabilityLevel.LOW
    fresh = compute_reliability(parameter_size_b=70, compression_count=0, checkpoints=[])
    assert (fresh.percent, fresh.level) == (95, ReliabilityLevel.HIGH)


def test_specs_display_string():
    reliability = Reliability(score=0.65, model_factor=0.7, compression_penalty=1.0, context_confidence=0.65 / 0.7)
    line = context_line(used=5234, max_tokens=13600, reliability=reliability, compression_count=2)
    assert line == "Context: 5,234/13,600 🟡 65% (2 compressions)"
    assert context_line(used=0, max_tokens=1700, reliability=reliability, compression_count=1).endswith(
        "(1 compression)"
    )


@pytest.mark.parametrize(
    ("size", "band"),
    [
        (None, SMALL_MODELS),
        (0.0, SMALL_MODELS),
        (7.0, SMALL_MODELS),
        (12.99, SMALL_MODELS),
        (13.0, MEDIUM_MODELS),
        (69.99, MEDIUM_MODELS),
        (70.0, LARGE_MODELS),
    ],
)
def test_size_band_bounds(size, band):
    assert size_band(size) is band


@pytest.mark.parametrize(("size", "quiet", "warned"), [(3, 1, 2), (8, 1, 2), (None, 1, 2), (13, 2, 3), (70, 4, 5)])
def test_the_warning_starts_at_the_bands_lower_end(size, quiet, warned):
    assert low_reliability_warning(model="m", parameter_size_b=size, compression_count=quiet) is None
    warning = low_reliability_warning(model="m", parameter_size_b=size, compression_count=warned)
    assert warning is not None
    assert warning.band is size_band(size)
    assert warning.lines[0] == f"Your model (m) has compressed the conversation {warned} times."
    assert warning.lines[1] == f"{warning.band.name} models may lose context accuracy after multiple compressions."
    assert warning.lines[2].startswith(f"Recommend: {warning.band.recommend} (")
    assert warning.recommendations == RECOMMENDATIONS
    assert "⚠" not in " ".join(warning.lines), "the page draws its own icon"


@pytest.mark.parametrize(
    ("tag", "size"),
    [
        ("llama3.2:3b", 3.0),
        ("qwen2.5:0.5b", 0.5),
        ("llama3.1:70b-instruct-q4_K_M", 70.0),
        ("embedded/smollm2-135m", 0.135),
        ("mistral-7b", 7.0),
        ("mistral", None),
        ("llama3.2", None),
    ],
)
def test_parameter_size_from_tag(tag, size):
    assert parameter_size_from_tag(tag) == size


def test_a_model_under_one_billion_parameters_is_small():
    assert is_small_model(0.135)
    assert not is_small_model(1.0)
    assert not is_small_model(None)


@pytest.mark.parametrize(
    ("stored", "percent", "level"),
    [
        (-1e308, 0, ReliabilityLevel.CRITICAL),
        (-math.inf, 0, ReliabilityLevel.CRITICAL),
        (math.nan, 0, ReliabilityLevel.CRITICAL),
        (1e308, 100, ReliabilityLevel.HIGH),
        (math.inf, 100, ReliabilityLevel.HIGH),
        (0.845, 85, ReliabilityLevel.HIGH),
    ],
)
def test_a_score_outside_its_range_reads_as_its_nearest_bound(stored, percent, level):
    assert score_percent(stored) == percent
    assert reliability_level(stored) is level
