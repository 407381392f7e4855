from __future__ import annotations

import pytest

from contextmgr.core.tiers import UnknownContextSize, context_profile, context_profiles, ollama_context_size

EXPECTED = {
    2048: (1700, 1, "Minimal", 0),
    4096: (3400, 1, "Minimal", 0),
    8192: (6800, 2, "Basic", 1),
    16384: (13600, 3, "Standard", 3),
    32768: (27200, 4, "Premium", 10),
    65536: (54400, 5, "Ultra", 15),
    131072: (108800, 5, "Ultra", 15),
}


def test_table_has_every_size_with_its_ollama_size_and_tier():
    table = {
        p.size: (p.ollama_context_size, p.tier.number, p.tier.name, p.tier.max_checkpoints) for p in context_profiles()
    }
    assert table == EXPECTED
    assert [p.label for p in context_profiles()] == ["2K", "4K", "8K", "16K", "32K", "64K", "128K"]


def test_ollama_sizes_are_85_percent_of_the_nominal_thousands():
    for profile in context_profiles():
        nominal_thousands = int(profile.label.rstrip("K")) * 1000
        assert profile.ollama_context_size == nominal_thousands * 85 // 100


def test_tier_labels_and_rollover():
    assert context_profile(2048).tier.label == "Tier 1 Minimal"
    assert context_profile(2048).tier.rolls_over
    assert not context_profile(8192).tier.rolls_over
    assert context_profile(131072).tier.label == "Tier 5 Ultra"


def test_max_tokens_is_the_ollama_size_not_the_selection():
    assert ollama_context_size(16384) == 13600


def test_per_model_override_applies_only_to_that_model_and_size():
    overrides = {"tiny:1b": {16384: 9000}}
    assert ollama_context_size(16384, model="tiny:1b", overrides=overrides) == 9000
    assert ollama_context_size(8192, model="tiny:1b", overrides=overrides) == 6800
    assert ollama_context_size(16384, model="other:7b", overrides=overrides) == 13600


def test_unknown_size_names_the_choices():
    with pytest.raises(UnknownContextSize, match=r"5000 is not offered; choose one of 2048 \(2K\)"):
        context_profile(5000)
