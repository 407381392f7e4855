"""Measured retention: which key facts of the compressed messages a checkpoint still holds.

Facts are extracted without the LLM: file paths, URLs, identifiers in code
spans, numbers with units, quoted strings, what goal markers name, and the
object of a decision ("use JWT"). A fact is kept when its normalized text
(case, spaces and surrounding punctuation ignored) occurs in the checkpoint's
rendered text (summary and structured fields). Every aging step is measured
against the same original list, so retention can only be compared, level by
level, with what the messages said.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from contextmgr.core.markers import ArtifactRecord, DecisionUpdate, NextStep, parse_markers

FactKind = Literal["decision", "path", "url", "code", "number", "quote", "marker"]
# Decisions and paths are what a later turn most needs: they are appended to the
# checkpoint's structured fields when a summary drops them.
HIGH_VALUE: frozenset[str] = frozenset({"decision", "path"})
MAX_FACT_CHARS = 120
MAX_FACTS = 200

_URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
_PATH = re.compile(
    r"(?<![\w/.])(?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]{1,6}\b"
    r"|(?<![\w/.-])[\w-]+\.(?:py|ts|tsx|js|jsx|json|md|txt|yml|yaml|toml|cfg|ini|sql|sh|go|rs|java|rb|php|html|css|c|h|cpp)\b"
)
_CODE = re.compile(r"`([^`\n]{2,80})`")
_NUMBER = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:%|ms|s|sec|min|h|hours?|days?|weeks?|years?|km|m|cm|mm|kg|g|t|tons?|"
    r"GB|MB|KB|TB|GiB|MiB|KiB|px|k|K|tokens|USD|EUR|€|\$)(?![\w])"
)
_QUOTE = re.compile(r"\"([^\"\n]{3,80})\"|“([^”\n]{3,80})”")
_DECISION_VERB = re.compile(
    r"\b(?:we(?:'ll| will)? use|let's use|decided to use|decided on|going with|chose|switch(?:ed)? to|use)\s+"
    r"([A-Za-z0-9][\w.+#/-]*(?:\s+[A-Za-z0-9][\w.+#/-]*)?)",
    re.I,
)
_STOP_OBJECTS = frozenset(
    {"a", "an", "the", "it", "this", "that", "them", "of", "to", "in", "and", "or", "for", "with"}
)


@dataclass(frozen=True)
class Fact:
    kind: FactKind
    text: str


@dataclass(frozen=True)
class Retention:
    total: int
    kept: int
    missing: tuple[Fact, ...]

    @property
    def score(self) -> float:
        """Share of facts kept; 1.0 when there was nothing to keep."""
        return self.kept / self.total if self.total else 1.0


def normalize(text: str) -> str:
    """Case, whitespace and the punctuation around words do not make a fact different."""
    text = text.casefold().replace("“", '"').replace("”", '"').replace("’", "'")
    return re.sub(r"[\s*_`\"']+", "", text).strip(".,;:!?()[]{}")


def _decision_object(match: re.Match[str]) -> str | None:
    words = match.group(1).split()
    while words and words[-1].casefold() in _STOP_OBJECTS:
        words.pop()
    if not words or words[0].casefold() in _STOP_OBJECTS:
        return None
    return "use " + " ".join(words).rstrip(".,;:")


def extract_facts(texts: Iterable[str]) -> tuple[Fact, ...]:
    """Every key fact of ``texts``, in order of appearance, each once."""
    found: dict[str, Fact] = {}

    def add(kind: FactKind, text: str) -> None:
        text = text.strip().rstrip(".,;:")
        key = normalize(text)
        if len(key) >= 2 and len(text) <= MAX_FACT_CHARS and key not in found and len(found) < MAX_FACTS:
            found[key] = Fact(kind, text)

    for text in texts:
        for update in parse_markers(text):
            if isinstance(update, DecisionUpdate):
                add("decision", update.description)
            elif isinstance(update, ArtifactRecord):
                add("path", update.path)
            elif isinstance(update, NextStep):
                add("marker", update.text)
        for match in _URL.finditer(text):
            add("url", match.group(0))
        for match in _PATH.finditer(text):
            add("path", match.group(0))
        for match in _CODE.finditer(text):
            add("code", match.group(1))
        for match in _NUMBER.finditer(text):
            add("number", match.group(0))
        for match in _QUOTE.finditer(text):
            add("quote", match.group(1) or match.group(2))
        for match in _DECISION_VERB.finditer(text):
            phrase = _decision_object(match)
            if phrase is not None:
                add("decision", phrase)
    return tuple(found.values())


def measure_retention(facts: Sequence[Fact], text: str) -> Retention:
    """Which of ``facts`` are still findable in ``text`` (a checkpoint's rendered text)."""
    haystack = normalize(text)
    missing = tuple(fact for fact in facts if normalize(fact.text) not in haystack)
    return Retention(total=len(facts), kept=len(facts) - len(missing), missing=missing)


def high_value(facts: Iterable[Fact]) -> tuple[Fact, ...]:
    return tuple(fact for fact in facts if fact.kind in HIGH_VALUE)


def facts_to_json(facts: Iterable[Fact]) -> list[list[str]]:
    return [[fact.kind, fact.text] for fact in facts]


def facts_from_json(data: object) -> tuple[Fact, ...]:
    """Stored facts back; anything malformed is skipped rather than trusted."""
    if not isinstance(data, list):
        return ()
    kinds = {"decision", "path", "url", "code", "number", "quote", "marker"}
    return tuple(
        Fact(item[0], item[1])
        for item in data
        if isinstance(item, list) and len(item) == 2 and item[0] in kinds and isinstance(item[1], str)
    )
