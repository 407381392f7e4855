"""Context profiles: the selectable sizes, their Ollama sizes and tiers.

The table is data (``profiles.json`` next to this module), not code branches, so
a new size or a changed tier is an edit to one file. The adapter
(``engine.resources``) reads it once and hands it to ``profiles_from_data``.
A per-model override replaces the Ollama size of a selection for one model (for
example a model whose native context is smaller than the selection).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The table's file name, next to this module; only the adapter opens it.
PROFILES_FILE_NAME = "profiles.json"


class UnknownContextSize(ValueError):
    """The requested context size is not one of the selectable sizes."""


@dataclass(frozen=True)
class Tier:
    number: int
    name: str
    max_checkpoints: int
    memory_share: float = 0.0

    @property
    def label(self) -> str:
        return f"Tier {self.number} {self.name}"

    @property
    def rolls_over(self) -> bool:
        """Tier 1 keeps no checkpoints: it rolls the context over instead."""
        return self.max_checkpoints == 0


@dataclass(frozen=True)
class ContextProfile:
    size: int
    label: str
    ollama_context_size: int
    tier: Tier


def profiles_from_data(data: Mapping[str, Any]) -> tuple[ContextProfile, ...]:
    """Every selectable size of the table ``data`` (``profiles.json``, parsed), smallest first."""
    tiers = {
        row["tier"]: Tier(
            number=row["tier"],
            name=row["name"],
            max_checkpoints=row["max_checkpoints"],
            memory_share=row["memory_share"],
        )
        for row in data["tiers"]
    }
    return tuple(
        ContextProfile(
            size=row["size"],
            label=row["label"],
            ollama_context_size=row["ollama_context_size"],
            tier=tiers[row["tier"]],
        )
        for row in sorted(data["sizes"], key=lambda row: row["size"])
    )


def find_profile(profiles: Sequence[ContextProfile], size: int) -> ContextProfile:
    """The profile of a selectable size among ``profiles``; raises UnknownContextSize otherwise."""
    for profile in profiles:
        if profile.size == size:
            return profile
    choices = ", ".join(f"{p.size} ({p.label})" for p in profiles)
    raise UnknownContextSize(f"context size {size} is not offered; choose one of {choices}")


def profile_num_ctx(
    profile: ContextProfile,
    *,
    model: str | None = None,
    overrides: Mapping[str, Mapping[int, int]] | None = None,
) -> int:
    """The ``num_ctx`` for a selection: the profile's value unless ``overrides[model][size]`` says otherwise.

    This, never the user's selection, is a session's ``max_tokens``.
    """
    if model is not None and overrides:
        per_model = overrides.get(model, {})
        if profile.size in per_model:
            return per_model[profile.size]
    return profile.ollama_context_size
