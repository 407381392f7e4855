"""Context profiles: the selectable sizes, their Ollama sizes and tiers.

The table is data (``profiles.json``), not code branches, so a new size or a
changed tier is an edit to one file. A per-model override replaces the Ollama
size of a selection for one model (for example a model whose native context is
smaller than the selection).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PROFILES_FILE = Path(__file__).with_name("profiles.json")


class UnknownContextSize(ValueError):
    """The requested context size is not one of the selectable sizes."""


@dataclass(frozen=True)
class Tier:
    number: int
    name: str
    max_checkpoints: int
    ledger_share: float = 0.0

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


@cache
def context_profiles() -> tuple[ContextProfile, ...]:
    """Every selectable size, smallest first, read once from ``profiles.json``."""
    data = json.loads(PROFILES_FILE.read_text(encoding="utf-8"))
    tiers = {
        row["tier"]: Tier(
            number=row["tier"],
            name=row["name"],
            max_checkpoints=row["max_checkpoints"],
            ledger_share=row["ledger_share"],
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


def context_profile(size: int) -> ContextProfile:
    """The profile of a selectable size; raises UnknownContextSize otherwise."""
    for profile in context_profiles():
        if profile.size == size:
            return profile
    choices = ", ".join(f"{p.size} ({p.label})" for p in context_profiles())
    raise UnknownContextSize(f"context size {size} is not offered; choose one of {choices}")


def ollama_context_size(
    size: int,
    *,
    model: str | None = None,
    overrides: Mapping[str, Mapping[int, int]] | None = None,
) -> int:
    """The ``num_ctx`` for a selection: the profile's value unless ``overrides[model][size]`` says otherwise.

    This, never the user's selection, is a session's ``max_tokens``.
    """
    profile = context_profile(size)
    if model is not None and overrides:
        per_model = overrides.get(model, {})
        if size in per_model:
            return per_model[size]
    return profile.ollama_context_size
