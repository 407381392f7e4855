"""Recall: the old messages a new one asks about, brought back verbatim from the full history.

A message that left the context is still in the history. Each turn the new message is the query:
the history's messages that left the context are ranked against it with BM25 (``bm25s``, words
stemmed by Snowball's English stemmer, English stop words left out), and the best fit a recall
block that stands just before the new message, so that the prompt's beginning stays the same from
turn to turn and a local model reuses its prompt cache. Each item is dated and says who said it, and
its relative dates are made absolute ("last Saturday (20 May 2023)"); a message too long for its share
is cut to its sentences that hold the words it was recalled for.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from fractions import Fraction
from functools import cache

import bm25s
import numpy
import Stemmer

from engine.core.dates import date_text, resolve_relative_dates

# The most a recall block may take of the context. A compression leaves the prompt at 60% (TARGET_FILL) and a
# reply may take 15%: of the 25% left, recall takes up to 15%, so that the turns after a compression still
# have room before the next trigger; near the trigger it gets what the reply's cap leaves, down to nothing.
RECALL_SHARE = Fraction(3, 20)
# bm25s sets its own logger to DEBUG when imported and logs every index it builds: one a turn is no news.
logging.getLogger("bm25s").setLevel(logging.WARNING)
RECALL_HEADING = "Recalled from earlier in this conversation (verbatim, with the day each was said):"
# The most messages a block holds, however much room is left: past this, BM25's tail is noise.
MAX_ITEMS = 24
# One message may take at most this share of the block before it is cut to its matching sentences.
ITEM_SHARE = 3
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"(?u)\b\w\w+\b")
_STOP_WORDS = "en_plus"


@dataclass(frozen=True)
class RecallCandidate:
    """A message of the history that is not in the context."""

    id: int
    position: int
    role: str
    content: str
    said_on: date | None


@dataclass(frozen=True)
class RecallItem:
    candidate: RecallCandidate
    text: str
    score: float
    words: tuple[str, ...]  # the new message's words it shares: why it was recalled


@dataclass(frozen=True)
class Recall:
    items: tuple[RecallItem, ...] = ()

    @property
    def text(self) -> str:
        """The block as the model reads it ("" when nothing was recalled), oldest first."""
        if not self.items:
            return ""
        return "\n".join([RECALL_HEADING, *(_line(item) for item in self.items)])


def _line(item: RecallItem) -> str:
    said = f", {date_text(item.candidate.said_on)}" if item.candidate.said_on else ""
    return f"[#{item.candidate.position} {item.candidate.role}{said}] {item.text}"


@cache
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def _stems(text: str) -> list[str]:
    """The words of ``text`` as BM25 sees them: lowercased, stop words out, stemmed."""
    tokens = bm25s.tokenize([text], stopwords=_STOP_WORDS, stemmer=_stemmer(), return_ids=False, show_progress=False)
    return list(tokens[0])


def _words_for(query: str) -> dict[str, str]:
    """Each stem of the query with the word of the query it came from."""
    words: dict[str, str] = {}
    for word in _WORD.findall(query):
        for stem in _stems(word):
            words.setdefault(stem, word)
    return words


def _excerpt(content: str, stems: set[str], budget: int, cost: Callable[[str], int]) -> str:
    """``content`` whole when it fits ``budget``, else its sentences that hold one of ``stems``,
    in order, as many as fit."""
    if cost(content) <= budget:
        return content
    kept: list[str] = []
    for sentence in (s.strip() for s in _SENTENCE.split(content) if s.strip()):
        if stems & set(_stems(sentence)) and cost(" … ".join([*kept, sentence])) <= budget:
            kept.append(sentence)
    return " … ".join(kept)


def with_recall(found: Recall, message: str) -> str:
    """The new message as the model reads it: the recall block first, when there is one."""
    return f"{found.text}\n\n{message}" if found.items else message


def recall_budget(*, max_tokens: int, prompt_tokens: int, reply_tokens: int) -> int:
    """The tokens a recall block may take in a prompt of ``prompt_tokens`` whose reply may take
    ``reply_tokens``, in a context of ``max_tokens``."""
    return max(0, min(int(max_tokens * RECALL_SHARE), max_tokens - prompt_tokens - reply_tokens))


@dataclass(frozen=True)
class RecallIndex:
    """The history's messages that left the context, indexed for BM25: built once for a set of
    candidates and queried every turn until that set changes (a compression, a restore)."""

    candidates: tuple[RecallCandidate, ...] = ()
    corpus: tuple[tuple[str, ...], ...] = ()
    retriever: bm25s.BM25 | None = field(default=None, compare=False)


def recall_index(candidates: Sequence[RecallCandidate]) -> RecallIndex:
    """The BM25 index of ``candidates`` (their stems, stop words left out)."""
    if not candidates:
        return RecallIndex()
    corpus = bm25s.tokenize(
        [c.content for c in candidates],
        stopwords=_STOP_WORDS,
        stemmer=_stemmer(),
        return_ids=False,
        show_progress=False,
    )
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    return RecallIndex(tuple(candidates), tuple(tuple(tokens) for tokens in corpus), retriever)


def recall(query: str, index: RecallIndex, *, budget_tokens: int, cost: Callable[[str], int]) -> Recall:
    """The candidates of ``index`` that best match ``query``, within ``budget_tokens`` (the heading
    included), oldest first. Nothing when the query has no word a candidate shares."""
    if index.retriever is None:  # nothing has left the context: the query is not even read
        return Recall()
    query_words = _words_for(query)
    if not query_words or budget_tokens <= cost(RECALL_HEADING):
        return Recall()
    scores = index.retriever.get_scores(list(query_words))
    ranked = sorted(map(int, numpy.flatnonzero(scores > 0)), key=lambda i: (-scores[i], -i))
    spent = cost(RECALL_HEADING)
    items: list[RecallItem] = []
    for position in ranked[:MAX_ITEMS]:
        candidate = index.candidates[position]
        shared = set(index.corpus[position]) & set(query_words)
        text = _excerpt(candidate.content, shared, (budget_tokens - cost(RECALL_HEADING)) // ITEM_SHARE, cost)
        if candidate.said_on is not None:
            text = resolve_relative_dates(text, candidate.said_on)
        item = RecallItem(candidate, text, float(scores[position]), tuple(query_words[s] for s in sorted(shared)))
        price = cost(_line(item)) + 1
        if text and spent + price <= budget_tokens:
            items.append(item)
            spent += price
    return Recall(tuple(sorted(items, key=lambda item: item.candidate.position)))
