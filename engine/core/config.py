"""Compression and snapshot configuration with the spec's defaults, and how replies are sampled.

``context_config_from_mapping`` is the one place settings coming from outside
(environment, a session's stored settings, an API body) are validated, so every
entry point gives the same clear error for the same mistake. It takes the spec's
camelCase names (``preserveRecent``) as well as the snake_case ones stored here
(``preserve_recent``); ``canonical_settings`` is that translation. The
``sampling`` section is this product's, not the spec's: Ollama's option names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from engine.core.aging import MIN_TARGET_TOKENS

Strategy = Literal["summarize", "truncate"]
STRATEGIES: tuple[Strategy, ...] = ("summarize", "truncate")

# The largest context (num_ctx, or its selection) anything may name: far above every profile's and any local
# model's; a token count of the settings is within it too.
MAX_CONTEXT_TOKENS = 2**20
# A preserved tail larger than this share of the available budget would leave
# nothing to compress on small contexts (2048 tokens of a 1,700-token window).
PRESERVE_RECENT_MAX_SHARE = 3
# A new checkpoint's summary may take at most this share of the room after the system prompt
# (the spec's 1,024 from 8K up; 283 tokens on a 2K session of 1,700).
SUMMARY_MAX_SHARE = 6
# A reply may take at most this share of num_ctx (255 tokens on a 2K session, not 512 = 30%).
REPLY_MAX_PERCENT = 15


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and why."""


@dataclass(frozen=True)
class CompressionConfig:
    enabled: bool = True
    strategy: Strategy = "summarize"
    preserve_recent: int = 2048
    summary_max_tokens: int = 1024


@dataclass(frozen=True)
class SnapshotConfig:
    enabled: bool = True
    auto_create: bool = True
    auto_threshold: float = 0.8


@dataclass(frozen=True)
class SamplingConfig:
    """How chat replies are sampled, in Ollama's option names; None leaves the model server's default
    (Ollama's, and the bundled server's: temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1
    over the last 64 tokens, a seed of its own)."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    seed: int | None = None


@dataclass(frozen=True)
class ContextConfig:
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    snapshots: SnapshotConfig = field(default_factory=SnapshotConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def as_mapping(self) -> dict[str, dict[str, Any]]:
        return asdict(self)


DEFAULT_CONFIG = ContextConfig()

# The spec's camelCase names of the keys whose stored (snake_case) name differs;
# ``enabled`` and ``strategy`` are spelled the same in both.
SPEC_KEY_NAMES: dict[str, dict[str, str]] = {
    "compression": {"preserveRecent": "preserve_recent", "summaryMaxTokens": "summary_max_tokens"},
    "snapshots": {"autoCreate": "auto_create", "autoThreshold": "auto_threshold"},
}


def _bool(section: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{section}.{key} must be true or false, not {value!r}")
    return value


def _positive_int(section: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONTEXT_TOKENS:
        raise ConfigError(
            f"{section}.{key} must be a whole number of tokens above 0, at most {MAX_CONTEXT_TOKENS:,}, not {value!r}"
        )
    return value


# What Ollama (and the bundled model server) samples with when a request leaves an option out; an
# Ollama model's Modelfile may set others.
OLLAMA_SAMPLING_DEFAULTS: dict[str, float] = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.9,
    "repeat_penalty": 1.1,
    "repeat_last_n": 64,
}
# The values a sampling option may take: lowest, highest (None: no bound), whole numbers only.
# The largest whole sampling value: kept exactly as the float it is carried in, and within 64 bits.
MAX_SAMPLING_WHOLE = 2**53
SAMPLING_RANGES: dict[str, tuple[float, float | None, bool]] = {
    "temperature": (0.0, 2.0, False),
    "top_k": (0, None, True),
    "top_p": (0.0, 1.0, False),
    "repeat_penalty": (0.5, 2.0, False),
    # Ollama's: 0 none, -1 the whole context.
    "repeat_last_n": (-1, None, True),
    # -1: a random seed.
    "seed": (-1, None, True),
}


def _sampling_value(where: str, name: str, given: Mapping[str, Any]) -> float | None:
    value = given.get(name)
    if value is None:
        return None
    low, high, whole = SAMPLING_RANGES[name]
    # NaN compares false with every bound, so finiteness is its own check.
    number = not isinstance(value, bool) and isinstance(value, int if whole else int | float)
    number = number and not (isinstance(value, float) and not math.isfinite(value))
    field = f"{where}.{name}" if where else name
    if not number or value < low or (high is not None and value > high):
        kind = "a whole number" if whole else "a number"
        bounds = f"from {low:g} to {high:g}" if high is not None else f"of {low:g} or more"
        raise ConfigError(f"{field} must be {kind} {bounds} (or null: the model's default), not {value!r}")
    if value > MAX_SAMPLING_WHOLE:
        raise ConfigError(f"{field} must be at most {MAX_SAMPLING_WHOLE:,}, not {value!r}")
    return float(value)


def _sampling_whole(where: str, name: str, given: Mapping[str, Any]) -> int | None:
    value = _sampling_value(where, name, given)
    return None if value is None else int(value)


def sampling_config(given: Mapping[str, Any], *, where: str) -> SamplingConfig:
    """The sampling options of ``given`` (its keys named in ``SAMPLING_RANGES``; others are not
    read), validated; ``where`` names their object in an error ("sampling", "options"; "": none)."""
    return SamplingConfig(
        temperature=_sampling_value(where, "temperature", given),
        top_k=_sampling_whole(where, "top_k", given),
        top_p=_sampling_value(where, "top_p", given),
        repeat_penalty=_sampling_value(where, "repeat_penalty", given),
        repeat_last_n=_sampling_whole(where, "repeat_last_n", given),
        seed=_sampling_whole(where, "seed", given),
    )


def _merge(section: str, defaults: Mapping[str, Any], given: Any) -> dict[str, Any]:
    if given is None:
        return dict(defaults)
    if not isinstance(given, Mapping):
        raise ConfigError(f"{section} must be an object, not {given!r}")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ConfigError(f"{section} has unknown settings: {', '.join(map(str, unknown))}")
    return {**defaults, **given}


def _canonical_section(section: str, given: Any) -> Any:
    if not isinstance(given, Mapping):
        return given  # ``_merge`` names the mistake
    names = SPEC_KEY_NAMES[section]
    both = sorted(spec for spec, stored in names.items() if spec in given and stored in given)
    if both:
        pairs = ", ".join(f"{spec} and {names[spec]}" for spec in both)
        raise ConfigError(f"{section} gives the same setting twice, in the spec's and the stored spelling: {pairs}")
    return {names.get(key, key): value for key, value in given.items()}


def canonical_settings(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """``data`` with the spec's camelCase keys renamed to the stored snake_case ones (values
    unchecked: ``context_config_from_mapping`` checks them). A section giving one setting in
    both spellings is refused, as neither could be said to win."""
    return {
        section: _canonical_section(section, given) if section in SPEC_KEY_NAMES else given
        for section, given in (data or {}).items()
    }


def context_config_from_mapping(
    data: Mapping[str, Any] | None, *, base: ContextConfig = DEFAULT_CONFIG
) -> ContextConfig:
    """Validate ``data`` (partial settings, e.g. ``{"compression": {"strategy": "truncate"}}``,
    keys in either spelling, see ``canonical_settings``) over ``base``."""
    data = canonical_settings(data)
    unknown = sorted(set(data) - {"compression", "snapshots", "sampling"})
    if unknown:
        raise ConfigError(f"unknown settings sections: {', '.join(map(str, unknown))}")
    base_map = base.as_mapping()
    comp = _merge("compression", base_map["compression"], data.get("compression"))
    snap = _merge("snapshots", base_map["snapshots"], data.get("snapshots"))
    samp = _merge("sampling", base_map["sampling"], data.get("sampling"))

    if comp["strategy"] not in STRATEGIES:
        raise ConfigError(f"compression.strategy must be one of {', '.join(STRATEGIES)}, not {comp['strategy']!r}")
    threshold = snap["auto_threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        raise ConfigError(f"snapshots.auto_threshold must be a number in (0, 1], not {threshold!r}")

    return ContextConfig(
        compression=CompressionConfig(
            enabled=_bool("compression", "enabled", comp["enabled"]),
            strategy=comp["strategy"],
            preserve_recent=_positive_int("compression", "preserve_recent", comp["preserve_recent"]),
            summary_max_tokens=_positive_int("compression", "summary_max_tokens", comp["summary_max_tokens"]),
        ),
        snapshots=SnapshotConfig(
            enabled=_bool("snapshots", "enabled", snap["enabled"]),
            auto_create=_bool("snapshots", "auto_create", snap["auto_create"]),
            auto_threshold=float(threshold),
        ),
        sampling=sampling_config(samp, where="sampling"),
    )


def auto_snapshot_due(
    config: SnapshotConfig, *, taken_this_round: Callable[[], bool], usage: float | None = None
) -> bool:
    """The spec's automatic snapshot: one per compression round, taken when ``usage`` (of the
    available budget) first reaches ``auto_threshold``, or just before the compression
    (``usage`` None) if none was. ``taken_this_round`` says whether one was already taken since
    the last compression; it is asked only when the rest of the policy calls for a snapshot."""
    if not (config.enabled and config.auto_create):
        return False
    if usage is not None and usage < config.auto_threshold:
        return False
    return not taken_this_round()


def effective_preserve_recent(config: CompressionConfig, available_tokens: int) -> int:
    """The preserved tail, capped to a third of the available budget so small contexts can still compress."""
    return max(0, min(config.preserve_recent, available_tokens // PRESERVE_RECENT_MAX_SHARE))


def preserve_recent_limit(room_tokens: int) -> int:
    """The largest preserved tail a session may be set to: a third of ``room_tokens``, its
    context after the system prompt (checkpoints may lower what is used, see ``effective_preserve_recent``)."""
    return max(1, room_tokens // PRESERVE_RECENT_MAX_SHARE)


def summary_max_tokens_limit(room_tokens: int) -> int:
    """The largest summary a session may be set to: a sixth of ``room_tokens``, its context after the system prompt."""
    return max(1, room_tokens // SUMMARY_MAX_SHARE)


def effective_summary_max_tokens(config: CompressionConfig, room_tokens: int) -> int:
    """The summary target a session uses: its setting (by default the spec's 1,024), capped to
    ``summary_max_tokens_limit`` so that it follows the context size."""
    return min(config.summary_max_tokens, summary_max_tokens_limit(room_tokens))


def reply_max_tokens(num_ctx: int, configured: int) -> int:
    """The reply cap of a session: ``configured`` (``OLLM_REPLY_MAX_TOKENS``), at most 15% of ``num_ctx``."""
    return max(1, min(configured, num_ctx * REPLY_MAX_PERCENT // 100))


def rollover_target_tokens(summary_max_tokens: int, *, keeps_checkpoints: bool) -> int:
    """The target of a rollover's ultra checkpoint, from the session's effective summary size.

    A tier that keeps checkpoints gives it the ultra level's target (an eighth);
    Tier 1 keeps no other checkpoint, so its ultra checkpoint is the whole compressed
    history and gets half the summary size (141 tokens on 2K, 283 on 4K).
    """
    if keeps_checkpoints:
        return max(MIN_TARGET_TOKENS, summary_max_tokens >> 3)
    return max(MIN_TARGET_TOKENS, summary_max_tokens // 2)


@dataclass(frozen=True)
class SessionLimits:
    """What a session's settings come to on its context: the values in use and the largest it accepts."""

    reply_max_tokens: int
    preserve_recent: int
    summary_max_tokens: int
    rollover_target: int
    preserve_recent_limit: int
    summary_max_tokens_limit: int


def session_limits(
    config: CompressionConfig,
    *,
    max_tokens: int,
    system_prompt_tokens: int,
    available_tokens: int,
    reply_max_configured: int,
    keeps_checkpoints: bool,
) -> SessionLimits:
    """The effective values of a session whose context is ``max_tokens`` (num_ctx), with
    ``available_tokens`` left after the system prompt and checkpoints now."""
    room = max(0, max_tokens - system_prompt_tokens)
    summary = effective_summary_max_tokens(config, room)
    return SessionLimits(
        reply_max_tokens=reply_max_tokens(max_tokens, reply_max_configured),
        preserve_recent=effective_preserve_recent(config, available_tokens),
        summary_max_tokens=summary,
        rollover_target=rollover_target_tokens(summary, keeps_checkpoints=keeps_checkpoints),
        preserve_recent_limit=preserve_recent_limit(room),
        summary_max_tokens_limit=summary_max_tokens_limit(room),
    )
