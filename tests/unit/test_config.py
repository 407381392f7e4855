from __future__ import annotations

import math
import re

import pytest

from engine.core.config import (
    DEFAULT_CONFIG,
    MAX_CONTEXT_TOKENS,
    CompressionConfig,
    ConfigError,
    SamplingConfig,
    SessionLimits,
    SnapshotConfig,
    auto_snapshot_due,
    canonical_settings,
    context_config_from_mapping,
    effective_preserve_recent,
    effective_summary_max_tokens,
    preserve_recent_limit,
    reply_max_tokens,
    rollover_target_tokens,
    sampling_config,
    session_limits,
    summary_max_tokens_limit,
)


def test_defaults_are_the_specs():
    assert DEFAULT_CONFIG.as_mapping() == {
        "compression": {"enabled": True, "strategy": "summarize", "preserve_recent": 2048, "summary_max_tokens": 1024},
        "snapshots": {"enabled": True, "auto_create": True, "auto_threshold": 0.8},
        "sampling": {
            "temperature": None,
            "top_k": None,
            "top_p": None,
            "repeat_penalty": None,
            "repeat_last_n": None,
            "seed": None,
        },
    }
    assert context_config_from_mapping(None) == DEFAULT_CONFIG


def test_partial_override_keeps_the_other_defaults():
    config = context_config_from_mapping({"compression": {"strategy": "truncate"}, "snapshots": {"auto_threshold": 1}})
    assert config.compression.strategy == "truncate"
    assert config.compression.preserve_recent == 2048
    assert config.snapshots.auto_threshold == 1.0


def test_sampling_is_the_servers_unless_set_and_a_session_may_set_a_value_back_to_it():
    assert DEFAULT_CONFIG.sampling == SamplingConfig()
    base = context_config_from_mapping({"sampling": {"temperature": 0.7, "top_k": 20}})
    config = context_config_from_mapping({"sampling": {"temperature": None, "repeat_penalty": 1.2}}, base=base)
    assert config.sampling == SamplingConfig(temperature=None, top_k=20, repeat_penalty=1.2)
    assert isinstance(context_config_from_mapping({"sampling": {"temperature": 1}}).sampling.temperature, float)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"temperature": 2.5},
            "sampling.temperature must be a number from 0 to 2 (or null: the model's default), not 2.5",
        ),
        ({"temperature": -0.1}, "sampling.temperature must be a number from 0 to 2"),
        ({"temperature": "hot"}, "sampling.temperature must be a number from 0 to 2"),
        ({"repeat_penalty": 0.4}, "sampling.repeat_penalty must be a number from 0.5 to 2"),
        ({"repeat_penalty": True}, "sampling.repeat_penalty must be a number from 0.5 to 2"),
        ({"top_p": 1.5}, "sampling.top_p must be a number from 0 to 1"),
        ({"top_k": -1}, "sampling.top_k must be a whole number of 0 or more"),
        ({"top_k": 2.5}, "sampling.top_k must be a whole number of 0 or more"),
        ({"repeat_last_n": -2}, "sampling.repeat_last_n must be a whole number of -1 or more"),
        ({"seed": "x"}, "sampling.seed must be a whole number of -1 or more"),
        ({"temprature": 1}, "sampling has unknown settings: temprature"),
        # NaN compares false with both bounds; infinities and whole numbers beyond 64 bits are refused too.
        ({"temperature": math.nan}, "sampling.temperature must be a number from 0 to 2"),
        ({"top_p": -math.inf}, "sampling.top_p must be a number from 0 to 1"),
        ({"repeat_penalty": math.inf}, "sampling.repeat_penalty must be a number from 0.5 to 2"),
        ({"top_k": math.inf}, "sampling.top_k must be a whole number of 0 or more"),
        ({"seed": 2**70}, "sampling.seed must be at most 9,007,199,254,740,992"),
        ({"repeat_last_n": 10**400}, "sampling.repeat_last_n must be at most"),
    ],
)
def test_sampling_values_are_checked(given, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        context_config_from_mapping({"sampling": given})


def test_a_requests_sampling_options_are_read_among_its_other_options():
    options = {"num_ctx": 2048, "temperature": 0, "top_k": 10, "top_p": 0.5, "repeat_penalty": 1.3,
               "repeat_last_n": -1, "seed": 7, "mirostat": 2}  # fmt: skip
    assert sampling_config(options, where="options") == SamplingConfig(0.0, 10, 0.5, 1.3, -1, 7)
    assert sampling_config({}, where="options") == SamplingConfig()
    with pytest.raises(ConfigError, match=re.escape("options.top_p must be a number from 0 to 1")):
        sampling_config({"top_p": 2}, where="options")
    with pytest.raises(ConfigError, match=re.escape("seed must be a whole number of -1 or more")):
        sampling_config({"seed": 0.5}, where="")


def test_override_over_a_custom_base():
    base = context_config_from_mapping({"compression": {"preserve_recent": 512}})
    config = context_config_from_mapping({"snapshots": {"enabled": False}}, base=base)
    assert config.compression.preserve_recent == 512
    assert not config.snapshots.enabled


def test_the_specs_camel_case_names_are_read_as_the_stored_snake_case_ones():
    spec = {
        "compression": {"enabled": False, "strategy": "truncate", "preserveRecent": 300, "summaryMaxTokens": 200},
        "snapshots": {"enabled": True, "autoCreate": False, "autoThreshold": 0.5},
    }
    assert canonical_settings(spec) == {
        "compression": {"enabled": False, "strategy": "truncate", "preserve_recent": 300, "summary_max_tokens": 200},
        "snapshots": {"enabled": True, "auto_create": False, "auto_threshold": 0.5},
    }
    assert context_config_from_mapping(spec) == context_config_from_mapping(canonical_settings(spec))
    assert context_config_from_mapping(spec).compression == CompressionConfig(False, "truncate", 300, 200)


def test_canonical_settings_leaves_other_shapes_for_validation_to_name():
    assert canonical_settings(None) == {}
    assert canonical_settings({"compression": [], "speed": {"x": 1}}) == {"compression": [], "speed": {"x": 1}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"compression": {"preserveRecent": 1, "preserve_recent": 1}},
            "compression gives the same setting twice, in the spec's and the stored spelling: "
            "preserveRecent and preserve_recent",
        ),
        (
            {"snapshots": {"autoThreshold": 0.5, "auto_threshold": 0.6, "autoCreate": True, "auto_create": True}},
            "snapshots gives the same setting twice, in the spec's and the stored spelling: "
            "autoCreate and auto_create, autoThreshold and auto_threshold",
        ),
        ({"compression": {"preserveRecnt": 10}}, "compression has unknown settings: preserveRecnt"),
    ],
)
def test_a_setting_in_both_spellings_or_misspelt_is_refused(data, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        context_config_from_mapping(data)


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


@pytest.mark.parametrize(
    ("num_ctx", "reply"),
    [(1700, 255), (3400, 510), (6800, 512), (13600, 512), (108800, 512), (4, 1)],
)
def test_the_reply_cap_follows_the_context_size(num_ctx, reply):
    assert reply_max_tokens(num_ctx, 512) == reply
    assert reply_max_tokens(num_ctx, 64) == min(64, reply)


def test_summary_size_follows_the_room_after_the_system_prompt():
    assert summary_max_tokens_limit(1700) == 283
    assert summary_max_tokens_limit(3) == 1
    assert effective_summary_max_tokens(CompressionConfig(), 1700) == 283
    assert effective_summary_max_tokens(CompressionConfig(), 6800) == 1024
    # An explicit setting wins while the budget holds it.
    assert effective_summary_max_tokens(CompressionConfig(summary_max_tokens=128), 1700) == 128
    assert preserve_recent_limit(1700) == 566
    assert preserve_recent_limit(0) == 1


def test_the_rollover_target_is_half_the_summary_on_tier_one_and_the_ultra_level_elsewhere():
    assert rollover_target_tokens(283, keeps_checkpoints=False) == 141
    assert rollover_target_tokens(1024, keeps_checkpoints=True) == 128
    assert rollover_target_tokens(20, keeps_checkpoints=False) == 16
    assert rollover_target_tokens(20, keeps_checkpoints=True) == 16


@pytest.mark.parametrize(
    ("max_tokens", "keeps", "expected"),
    [
        # num_ctx: reply, preserve recent (now), summary, rollover target, preserve limit, summary limit
        (1700, False, SessionLimits(255, 533, 283, 141, 566, 283)),
        (3400, False, SessionLimits(510, 1100, 566, 283, 1133, 566)),
        (6800, True, SessionLimits(512, 2048, 1024, 128, 2266, 1133)),
        (13600, True, SessionLimits(512, 2048, 1024, 128, 4533, 2266)),
    ],
)
def test_session_limits_per_context_size(max_tokens, keeps, expected):
    # No system prompt, one 100-token checkpoint: ``available`` is 100 below num_ctx.
    limits = session_limits(
        CompressionConfig(),
        max_tokens=max_tokens,
        system_prompt_tokens=0,
        available_tokens=max_tokens - 100,
        reply_max_configured=512,
        keeps_checkpoints=keeps,
    )
    assert limits == expected


def test_session_limits_cap_an_explicit_setting_and_keep_a_smaller_one():
    limits = session_limits(
        CompressionConfig(preserve_recent=300, summary_max_tokens=5000),
        max_tokens=1700,
        system_prompt_tokens=100,
        available_tokens=1600,
        reply_max_configured=512,
        keeps_checkpoints=False,
    )
    assert (limits.preserve_recent, limits.summary_max_tokens) == (300, 266)


class Asked:
    """``taken_this_round`` for the policy: answers ``taken`` and counts the questions."""

    def __init__(self, taken: bool) -> None:
        self.taken = taken
        self.times = 0

    def __call__(self) -> bool:
        self.times += 1
        return self.taken


@pytest.mark.parametrize(
    ("config", "usage", "taken", "due", "asked"),
    [
        (SnapshotConfig(), None, False, True, 1),  # before a compression, none taken this round
        (SnapshotConfig(), None, True, False, 1),  # one per round
        (SnapshotConfig(), 0.8, False, True, 1),  # usage reaches the threshold
        (SnapshotConfig(), 0.79, False, False, 0),  # under it: the round is not even looked at
        (SnapshotConfig(auto_threshold=0.5), 0.6, True, False, 1),
        (SnapshotConfig(auto_create=False), None, False, False, 0),
        (SnapshotConfig(enabled=False), 1.0, False, False, 0),
    ],
)
def test_the_automatic_snapshot_policy(config, usage, taken, due, asked):
    taken_this_round = Asked(taken)
    assert auto_snapshot_due(config, usage=usage, taken_this_round=taken_this_round) is due
    assert taken_this_round.times == asked


@pytest.mark.parametrize("key", ["preserve_recent", "summary_max_tokens"])
def test_a_token_count_of_the_settings_is_within_the_largest_context(key):
    assert context_config_from_mapping({"compression": {key: MAX_CONTEXT_TOKENS}}).compression
    with pytest.raises(ConfigError, match=f"compression.{key} must be .* at most 1,048,576, not 1048577"):
        context_config_from_mapping({"compression": {key: MAX_CONTEXT_TOKENS + 1}})
