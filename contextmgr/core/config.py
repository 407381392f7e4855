"""Compression and snapshot configuration with the spec's defaults.

``context_config_from_mapping`` is the one place settings coming from outside
(environment, a session's stored settings, an API body) are validated, so every
entry point gives the same clear error for the same mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Strategy = Literal["summarize", "truncate"]
STRATEGIES: tuple[Strategy, ...] = ("summarize", "truncate")

# A preserved tail larger than this share of the available budget would leave
# nothing to compress on small contexts (2048 tokens of a 1,700-token window).
PRESERVE_RECENT_MAX_SHARE = 3


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
class ContextConfig:
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    snapshots: SnapshotConfig = field(default_factory=SnapshotConfig)

    def as_mapping(self) -> dict[str, dict[str, Any]]:
        return asdict(self)


DEFAULT_CONFIG = ContextConfig()


def _bool(section: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{section}.{key} must be true or false, not {value!r}")
    return value


def _positive_int(section: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{section}.{key} must be a whole number of tokens above 0, not {value!r}")
    return value


def _merge(section: str, defaults: Mapping[str, Any], given: Any) -> dict[str, Any]:
    if given is None:
        return dict(defaults)
    if not isinstance(given, Mapping):
        raise ConfigError(f"{section} must be an object, not {given!r}")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ConfigError(f"{section} has unknown settings: {', '.join(map(str, unknown))}")
    return {**defaults, **given}


def context_config_from_mapping(
    data: Mapping[str, Any] | None, *, base: ContextConfig = DEFAULT_CONFIG
) -> ContextConfig:
    """Validate ``data`` (partial settings, e.g. ``{"compression": {"strategy": "truncate"}}``) over ``base``."""
    data = data or {}
    unknown = sorted(set(data) - {"compression", "snapshots"})
    if unknown:
        raise ConfigError(f"unknown settings sections: {', '.join(map(str, unknown))}")
    base_map = base.as_mapping()
    comp = _merge("compression", base_map["compression"], data.get("compression"))
    snap = _merge("snapshots", base_map["snapshots"], data.get("snapshots"))

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
    )


def effective_preserve_recent(config: CompressionConfig, available_tokens: int) -> int:
    """The preserved tail, capped to a third of the available budget so small contexts can still compress."""
    return max(0, min(config.preserve_recent, available_tokens // PRESERVE_RECENT_MAX_SHARE))
