from __future__ import annotations

import pytest

from contextmgr.core.config import (
    DEFAULT_CONFIG,
    CompressionConfig,
    ConfigError,
    context_config_from_mapping,
    effective_preserve_recent,
)


def test_defaults_are_the_specs():
    assert DEFAULT_CONFIG.as_mapping() == {
        "compression": {"enabled": True, "strategy": "summarize", "preserve_recent": 2048, "summary_max_tokens": 1024},
        "snapshots": {"enabled": True, "auto_create": True, "auto_threshold": 0.8},
    }
    assert context_config_from_mapping(None) == DEFAULT_CONFIG


def test_partial_override_keeps_the_other_defaults():
    config = context_config_from_mapping({"compression": {"strategy": "truncate"}, "snapshots": {"auto_threshold": 1}})
    assert config.compression.strategy == "truncate"
    assert config.compression.preserve_recent == 2048
    assert config.snapshots.auto_threshold == 1.0


def test_override_over_a_custom_base():
    base = context_config_from_mapping({"compression": {"preserve_recent": 512}})
    config = context_config_from_mapping({"snapshots": {"enabled": False}}, base=base)
    assert config.compression.preserve_recent == 512
    assert not config.snapshots.enabled


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"compresion": {}}, "unknown settings sections: compresion"),
        ({"compression": []}, "compression must be an object"),
        ({"compression": {"level": 3}}, "compression has unknown settings: level"),
        ({"compression": {"strategy": "drop"}}, "compression.strategy must be one of summarize, truncate"),
        ({"compression": {"enabled": "yes"}}, "compression.enabled must be true or false"),
        ({"compression": {"preserve_recent": 0}}, "compression.preserve_recent must be a whole number"),
        ({"compression": {"summary_max_tokens": True}}, "compression.summary_max_tokens must be a whole number"),
        ({"compression": {"summary_max_tokens": 10.5}}, "compression.summary_max_tokens must be a whole number"),
        ({"snapshots": {"auto_threshold": 0}}, r"snapshots.auto_threshold must be a number in \(0, 1\]"),
        ({"snapshots": {"auto_threshold": 1.5}}, r"snapshots.auto_threshold must be a number in \(0, 1\]"),
        ({"snapshots": {"auto_threshold": "0.8"}}, r"snapshots.auto_threshold must be a number in \(0, 1\]"),
        ({"snapshots": {"auto_create": None}}, "snapshots.auto_create must be true or false"),
    ],
)
def test_invalid_values_are_refused_with_a_clear_message(data, message):
    with pytest.raises(ConfigError, match=message):
        context_config_from_mapping(data)


def test_preserve_recent_is_capped_to_a_third_of_small_budgets():
    config = CompressionConfig()
    assert effective_preserve_recent(config, 12_600) == 2048
    assert effective_preserve_recent(config, 1_500) == 500
    assert effective_preserve_recent(config, -10) == 0
