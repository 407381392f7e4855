"""Measured retention: which key facts of the compressed messages a checkpoint still holds.

The facts come from ``core.fact_extraction``. A fact is kept when its normalized text (case, spaces and
surrounding punctuation ignored) occurs in the text it is looked up in: the next prompt, for the retention the
timeline shows. Every aging step is measured against the same original list, so retention can only be
compared, level by level, with what the messages said.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

# "token" is a specific token of the reference (core.clauses), "clause" a ledger's fact-bearing clause.
FactKind = Literal[
    "decision", "path", "url", "host", "identifier", "number", "version", "date", "name", "code", "quote", "marker",
    "token", "clause",
]  # fmt: skip
FACT_KINDS: frozenset[str] = frozenset(
    {"decision", "path", "url", "host", "identifier", "number", "version", "date", "name", "code", "quote", "marker",
     "token", "clause"}
)  # fmt: skip


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


def spaced(text: str) -> str:
    """``text`` casefolded, with markup quotes and emphasis off and runs of space as one, for a
    search that respects word boundaries."""
    text = text.casefold().replace("“", '"').replace("”", '"').replace("’", "'")
    return " ".join(re.sub(r"[*`\"]+", "", text).split())


def _found_token(token: str, haystack: str) -> bool:
    """A token is found as a whole: "12 classes" not in "112 classes", "F1" not in "F10"."""
    return re.search(rf"(?<![\w#]){re.escape(spaced(token))}(?!\w)", haystack) is not None


def measure_retention(facts: Sequence[Fact], text: str) -> Retention:
    """Which of ``facts`` are still findable in ``text`` (the next prompt, or a part of it). A
    reference token must be found whole; the other kinds after ``normalize``."""
    haystack = normalize(text)
    whole = spaced(text)
    missing = tuple(
        fact
        for fact in facts
        if not (_found_token(fact.text, whole) if fact.kind == "token" else normalize(fact.text) in haystack)
    )
    return Retention(total=len(facts), kept=len(facts) - len(missing), missing=missing)


def facts_to_json(facts: Iterable[Fact]) -> list[list[str]]:
    return [[fact.kind, fact.text] for fact in facts]


def facts_from_json(data: object) -> tuple[Fact, ...]:
    """Stored facts back; anything malformed is skipped rather than trusted."""
    if not isinstance(data, list):
        return ()
    return tuple(
        Fact(item[0], item[1])
        for item in data
        if isinstance(item, list) and len(item) == 2 and item[0] in FACT_KINDS and isinstance(item[1], str)
    )
