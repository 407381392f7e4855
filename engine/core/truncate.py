"""The ``truncate`` strategy: a deterministic extractive shortening.

Used when summarizing is switched off, as the fallback when a summary would
not be smaller than what it replaces, and as the checkpoint of a small model
whose summary keeps fewer facts (``fact_extract``). Sentences that carry a goal
marker (decisions, files, next steps) are chosen first, then those that state
a fact (``core.clauses``), then the others, each group from the oldest on,
until the token budget is spent; the extract keeps the original order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from engine.core.clauses import fact_clauses, states_fact
from engine.core.markers import parse_markers
from engine.core.retention import normalize
from engine.core.salience import chit_chat

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
ELLIPSIS = " …"


def shorten_extractive(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """An extract of ``text`` that ``count`` measures at most ``max_tokens``."""
    if count(text) <= max_tokens:
        return text
    pieces = [piece.strip() for piece in _SENTENCE_END.split(text) if piece.strip()]
    by_priority = sorted(
        range(len(pieces)), key=lambda i: (not parse_markers(pieces[i]), not states_fact(pieces[i]), i)
    )
    return _fill(pieces, by_priority, max_tokens, count) or _prefix(text, max_tokens, count)


def fact_extract(texts: list[str], max_tokens: int, count: Callable[[str], int], *, besides: Iterable[str] = ()) -> str:
    """The fact-bearing clauses of ``texts`` that ``count`` measures at most ``max_tokens``, one a
    line, in order (goal marker lines are the checkpoint's fields; greetings and questions that hold
    no value are left out, as the ledger leaves them); "" when none states a fact.
    Clauses in ``besides`` (the checkpoint's ledger holds them) are not written again."""
    held = {normalize(clause) for clause in besides}
    # Each states a fact and none is a marker line, a greeting or a question without a value: oldest first.
    clauses = [clause for clause in fact_clauses(texts) if normalize(clause) not in held and not chit_chat(clause)]
    return _fill(clauses, range(len(clauses)), max_tokens, count)


def _fill(pieces: list[str], by_priority: Iterable[int], max_tokens: int, count: Callable[[str], int]) -> str:
    """As many of ``pieces`` as fit in ``max_tokens``, taken in the order of ``by_priority`` (indexes
    into ``pieces``), joined in their own order."""
    chosen: list[int] = []
    # Counting each piece once keeps this linear; a join is checked once at
    # the end and pieces are dropped if the newlines cost more than assumed.
    total = 0
    for index in by_priority:
        cost = count(pieces[index]) + (1 if chosen else 0)
        if total + cost <= max_tokens:
            chosen.append(index)
            total += cost
    while chosen and count(_join(pieces, chosen)) > max_tokens:
        chosen.pop()
    return _join(pieces, chosen)


def _prefix(text: str, max_tokens: int, count: Callable[[str], int]) -> str:
    words = text.split()
    low, high = 0, len(words)
    # The longest word prefix (plus an ellipsis) that fits.
    while low < high:
        middle = (low + high + 1) // 2
        if count(" ".join(words[:middle]) + ELLIPSIS) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low]) + ELLIPSIS if low else ""


def _join(pieces: list[str], chosen: list[int]) -> str:
    return "\n".join(pieces[i] for i in sorted(chosen))
