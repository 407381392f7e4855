"""Compression Quality by Model Size"""

from __future__ import annotations

import pytest

from contextmgr.core.reliability import (
    LARGE_MODELS,
    MEDIUM_MODELS,
    SMALL_MODELS,
    low_reliability_warning,
    size_band,
)


@pytest.mark.parametrize(
    ("size", "band", "recommend"),
    [
        (3.0, SMALL_MODELS, "2-3 compressions max"),
        (7.0, SMALL_MODELS, "2-3 compressions max"),
        (13.0, MEDIUM_MODELS, "3-5 compressions"),
        (30.0, MEDIUM_MODELS, "3-5 compressions"),
        (70.0, LARGE_MODELS, "5-7 compressions"),
        (405.0, LARGE_MODELS, "5-7 compressions"),
    ],
)
def test_each_size_has_the_specs_band_and_recommendation(size, band, recommend):
    """Spec: "Small models (3B-7B): ... Recommend: 2-3 compressions max", "Medium models (13B-30B): ... Recommend:
    3-5 compressions", "Large models (70B+): ... Recommend: 5-7 compressions"."""
    assert size_band(size) == band
    assert band.recommend == recommend


@pytest.mark.parametrize(
    ("size", "first_warning", "text"),
    [
        (3.0, 2, "Recommend: 2-3 compressions max (small models, 3B-7B)."),
        (7.0, 2, "Recommend: 2-3 compressions max (small models, 3B-7B)."),
        (13.0, 3, "Recommend: 3-5 compressions (medium models, 13B-30B)."),
        (30.0, 3, "Recommend: 3-5 compressions (medium models, 13B-30B)."),
        (70.0, 5, "Recommend: 5-7 compressions (large models, 70B+)."),
    ],
)
def test_the_warning_starts_at_the_lower_end_of_the_bands_recommendation(size, first_warning, text):
    """Spec: "Recommend: 2-3 compressions max" (3B-7B), "3-5 compressions" (13B-30B), "5-7 compressions" (70B+).

    Differs, see docs/conformance.md: "The model-size bands" — the warning starts at the lower end of each range."""
    model = f"model:{size:g}b"
    assert low_reliability_warning(model=model, parameter_size_b=size, compression_count=first_warning - 1) is None
    warning = low_reliability_warning(model=model, parameter_size_b=size, compression_count=first_warning)
    assert warning is not None
    assert warning.lines[-1] == text
    assert warning.lines[0] == f"Your model ({model}) has compressed the conversation {first_warning} times."


@pytest.mark.parametrize(
    ("size", "band"),
    [
        (None, SMALL_MODELS),
        (0.135, SMALL_MODELS),
        (8.0, SMALL_MODELS),
        (12.9, SMALL_MODELS),
        (31.0, MEDIUM_MODELS),
        (69.9, MEDIUM_MODELS),
    ],
)
def test_sizes_outside_the_bands_count_with_the_smaller_band(size, band):
    """Spec: "Small models (3B-7B)", "Medium models (13B-30B)", "Large models (70B+)" leave out the sizes between
    them, below 3B and unknown sizes.

    Differs, see docs/conformance.md: "The model-size bands" — a size between two bands counts with the smaller
    one, as the spec's model factor groups it; below 3B and unknown count as small."""
    assert size_band(size) == band
