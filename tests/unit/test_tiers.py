from __future__ import annotations

import pytest

from engine.core.tiers import UnknownContextSize, find_profile, profile_num_ctx, profiles_from_data
from engine.resources import PROFILES_FILE, context_profile, context_profiles, ollama_context_size

EXPECTED = {
    2048: (1700, 1, "Minimal", 0),
    4096: (3400, 1, "Minimal", 0),
    8192: (6800, 2, "Basic", 3),
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


def test_the_adapter_reads_the_table_next_to_the_core_once():
    assert PROFILES_FILE.parent.name == "core"
    assert context_profiles() is context_profiles()


def test_the_core_reads_a_table_it_is_given_smallest_first():
    data = {
        "tiers": [{"tier": 9, "name": "Test", "max_checkpoints": 2, "memory_share": 0.5}],
        "sizes": [
            {"size": 2000, "label": "2x", "ollama_context_size": 1500, "tier": 9},
            {"size": 1000, "label": "1x", "ollama_context_size": 800, "tier": 9},
        ],
    }
    profiles = profiles_from_data(data)
    assert [(p.size, p.ollama_context_size) for p in profiles] == [(1000, 800), (2000, 1500)]
    assert find_profile(profiles, 2000).tier.label == "Tier 9 Test"
    assert profiles[0].tier.memory_share == 0.5
    with pytest.raises(UnknownContextSize, match=r"choose one of 1000 \(1x\), 2000 \(2x\)$"):
        find_profile(profiles, 3000)


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
    assert profile_num_ctx(context_profile(16384)) == 13600


def test_per_model_override_applies_only_to_that_model_and_size():
    overrides = {"tiny:1b": {16384: 9000}}
    assert ollama_context_size(16384, model="tiny:1b", overrides=overrides) == 9000
    assert ollama_context_size(8192, model="tiny:1b", overrides=overrides) == 6800
    assert ollama_context_size(16384, model="other:7b", overrides=overrides) == 13600
    assert ollama_context_size(16384, overrides=overrides) == 13600


def test_unknown_size_names_the_choices():
    with pytest.raises(UnknownContextSize, match=r"5000 is not offered; choose one of 2048 \(2K\)"):
        context_profile(5000)
