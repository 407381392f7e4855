"""Counting text with a GGUF model's own byte-level BPE, as llama.cpp counts it, without asking it.

The bundled model server counts exactly, but each count is a round trip to it (and from it to
llama.cpp's own HTTP server); a turn counts the user's message and the reply. A GPT-2-style
vocabulary (``tokenizer.ggml.model`` "gpt2") is its merges and a pre-tokenizer: ``from_gguf_vocabulary``
turns the merges into tiktoken ranks and splits the text as llama.cpp's pre-tokenizer of that name does.
Only the pre-tokenizers named in ``PRE_TOKENIZERS`` are known: any other vocabulary is refused
(VocabularyError), and the caller counts on the server. Reading the GGUF file is the adapter's
(``engine.resources``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import regex
import tiktoken

from engine.core.tokens import VocabularyError

# llama.cpp's GPT-2 expression (llama-vocab.cpp), with the fallback that makes tiktoken's matches cover
# the whole text: llama.cpp keeps what no alternative matches as a piece of its own, tiktoken would drop it.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@dataclass(frozen=True)
class PreTokenizer:
    """llama.cpp's expressions for one ``tokenizer.ggml.pre``, applied one after the other: each match of
    ``isolated`` a piece of its own, then ``pattern`` on the text between them."""

    isolated: str
    pattern: str


# SmolLM2's ("smollm"): every digit alone, then GPT-2's expression.
PRE_TOKENIZERS = {"smollm": PreTokenizer(isolated=r"(\p{N})", pattern=GPT2_PATTERN)}


def _byte_of_char() -> dict[str, int]:
    """The byte each character of a merge stands for: GPT-2's ``bytes_to_unicode``, where a printable
    byte is its own character and the others are 256, 257... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    byte_of = {chr(byte): byte for byte in printable}
    others = [byte for byte in range(256) if byte not in byte_of.values()]
    byte_of.update({chr(256 + index): byte for index, byte in enumerate(others)})
    return byte_of


@dataclass(frozen=True)
class TextCounter:
    """Counts plain text (special-token strings are text) in the model's tokens."""

    encoding: tiktoken.Encoding
    isolated: regex.Pattern[str]

    def count(self, text: str) -> int:
        # Surrogates (lone \ud800 escapes) cannot be encoded as UTF-8: replaced, as the model server does.
        safe = text.encode("utf-8", errors="replace").decode("utf-8")
        return sum(len(self.encoding.encode_ordinary(piece)) for piece in self.isolated.split(safe) if piece)


def from_gguf_vocabulary(*, model: str, pre: str, merges: Sequence[str]) -> TextCounter:
    """The counter of a GGUF vocabulary (its ``tokenizer.ggml.model``, ``.pre`` and ``.merges``); VocabularyError
    for one this module cannot count exactly."""
    if model != "gpt2":
        raise VocabularyError(f"the model's tokenizer is {model!r}, not a byte-level BPE (gpt2)")
    if pre not in PRE_TOKENIZERS:
        raise VocabularyError(f"the model's pre-tokenizer {pre!r} is not one of {', '.join(PRE_TOKENIZERS)}")
    byte_of = _byte_of_char()
    ranks = {bytes([byte]): rank for rank, byte in enumerate(byte_of.values())}
    for merge in merges:
        left, _, right = merge.partition(" ")
        try:
            merged = bytes(byte_of[char] for char in left + right)
        except KeyError as exc:
            raise VocabularyError(f"the merge {merge!r} holds a character that stands for no byte") from exc
        # A merge's rank is its place in the list, as its priority is in llama.cpp's BPE.
        ranks.setdefault(merged, len(ranks))
    rules = PRE_TOKENIZERS[pre]
    encoding = tiktoken.Encoding(name=f"gguf-{pre}", pat_str=rules.pattern, mergeable_ranks=ranks, special_tokens={})
    return TextCounter(encoding, regex.compile(rules.isolated))
