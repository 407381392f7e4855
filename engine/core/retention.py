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

# "token" is a specific token of the reference (core.clauses), "word" a distinctive word of it, "clause" a
# ledger's clause.
FactKind = Literal[
    "decision", "path", "url", "host", "identifier", "number", "version", "date", "name", "code", "quote", "marker",
    "token", "word", "clause",
]  # fmt: skip
FACT_KINDS: frozenset[str] = frozenset(
    {"decision", "path", "url", "host", "identifier", "number", "version", "date", "name", "code", "quote", "marker",
     "token", "word", "clause"}
)  # fmt: skip


@dataclass(frozen=True)
class Fact:
    kind: FactKind
    text: str


# How much more a checkpoint's specific tokens weigh in its score than its distinctive words (set on the
# tuning halves of both held-out sets: the technical one and the everyday chats).
TOKENS_WEIGHT = 2


@dataclass(frozen=True)
class Retention:
    total: int
    kept: int
    missing: tuple[Fact, ...]
    # Of them, the distinctive words ("word" facts): the other half of the score.
    words_total: int = 0
    words_kept: int = 0

    @property
    def score(self) -> float:
        """Share of facts kept; 1.0 when there was nothing to keep. With distinctive words among them, a
        weighted mean of two shares, the rest's counting twice the words': what a conversation names and
        what it says in words of its own both count, however many more of one it has."""
        shares = [
            (weight, kept / total)
            for weight, kept, total in ((TOKENS_WEIGHT, self.kept - self.words_kept, self.total - self.words_total),
                                        (1, self.words_kept, self.words_total))
            if total
        ]  # fmt: skip
        return sum(weight * share for weight, share in shares) / sum(weight for weight, _ in shares) if shares else 1.0


def normalize(text: str) -> str:
    """Case, whitespace and the punctuation around words do not make a fact different."""
    text = text.casefold().replace("“", '"').replace("”", '"').replace("’", "'")
    return re.sub(r"[\s*_`\"']+", "", text).strip(".,;:!?()[]{}")


def spaced(text: str) -> str:
    """``text`` casefolded, with markup quotes and emphasis off and runs of space as one, for a
    search that respects word boundaries."""
    text = text.casefold().replace("“", '"').replace("”", '"').replace("’", "'")
    return " ".join(re.sub(r"[*`\"]+", "", text).split())


def word_character(text: str) -> bool:
    """What a regular expression's ``\\w`` matches: a letter or digit of any alphabet, or an underscore."""
    return text.isalnum() or text == "_"


def _found_token(token: str, haystack: str) -> bool:
    """A token is found as a whole: "12 classes" not in "112 classes", "F1" not in "F10" (nor "#F1"), as
    ``(?<![\\w#])token(?!\\w)`` would find it; searched for without a pattern, as a checkpoint measures up to a
    thousand facts, which would each compile one."""
    needle = spaced(token)
    start = haystack.find(needle)
    while start != -1:
        end = start + len(needle)
        before, after = haystack[start - 1 : start], haystack[end : end + 1]
        if not (word_character(before) or before == "#" or word_character(after)):
            return True
        start = haystack.find(needle, start + 1)
    return False


def measure_retention(facts: Sequence[Fact], text: str) -> Retention:
    """Which of ``facts`` are still findable in ``text`` (the next prompt, or a part of it). A
    reference token or word must be found whole; the other kinds after ``normalize``."""
    haystack = normalize(text)
    whole = spaced(text)
    missing = tuple(
        fact
        for fact in facts
        if not (_found_token(fact.text, whole) if fact.kind in ("token", "word") else normalize(fact.text) in haystack)
    )
    words = sum(fact.kind == "word" for fact in facts)
    return Retention(
        total=len(facts),
        kept=len(facts) - len(missing),
        missing=missing,
        words_total=words,
        words_kept=words - sum(fact.kind == "word" for fact in missing),
    )


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
