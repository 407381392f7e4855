"""What a text states, read two independent ways: its specific tokens and its fact clauses.

*Specific tokens* (``reference_facts``) are every word that names one thing: a
number (with the noun it counts), scientific notation, a word with ``_ . / : -``
or braces inside it, inner capitals, an ALL-CAPS id, a ``#hex``, quoted or
backticked text, a capitalised word that does not open a sentence. They are
the reference a checkpoint's retention is measured against: broad, with no
ranking or budget, and built without the pattern table (``core.retention``)
that chooses what the ledger keeps, so a fact the ledger misses shows as
missing instead of never having been counted.

*Fact clauses* (``fact_clauses``) are the shortest spans that state a fact with
its sense: the clauses ("uploads over 20 MB go to the cold bucket") that hold a
specific token, a fact of the pattern table or a naming cue ("is called",
"set to", "switch to"). The ledger and the extract keep them verbatim, so the
model reads what a value is about, not a bare string.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache, lru_cache, wraps
from typing import TypeVar

import pysbd
from bm25s.stopwords import STOPWORDS_EN_PLUS

from engine.core.fact_extraction import extract_facts
from engine.core.markers import parse_markers
from engine.core.retention import Fact

_PLAIN_LOWER = re.compile(r"(?<![\w'’-])[a-z]{4,}(?![\w'’-])")
_STOP = frozenset(STOPWORDS_EN_PLUS)
# A clause longer than this is cut at its commas, so that one fact does not carry a paragraph.
MAX_CLAUSE_WORDS = 32

# Goal marker syntax ("[DECISION] … - LOCKED") is not a fact: the tag and the status word are left out.
_MARKER_SYNTAX = re.compile(
    r"\[\s*[A-Za-z]+\s*\]|\s[-–—]\s*(?:LOCKED|UNLOCKED|COMPLETED?|DONE|IN[\s_-]*PROGRESS|PENDING|TODO|OPEN)\b"
)
_FENCE = re.compile(r"^\s*(```|~~~)")
_LINE_PREFIX = re.compile(r"^\s*(?:>\s*)*(?:#{1,6}\s+|[-*+•]\s+|\d{1,3}[.)]\s+)?")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
# A clause ends at ; and dashes (sentences are pysbd's: not after "Dr." in "Dr. Vogel", nor inside "14.2").
_CLAUSE_END = re.compile(r"\s*;\s+|\s+[—–]\s+|\s+-\s+(?=[A-Za-z])")
_COMMA = re.compile(r",\s+")
_QUOTED = re.compile(r"`([^`\n]{2,80})`|\"([^\"\n]{2,80})\"|“([^”\n]{2,80})”")
_TRIM_START = "([{\"'“‘*_<"
_TRIM_END = ")]}\"'”’*_>.,;:!?"
_WHOLE_NUMBER = re.compile(r"[0-9][0-9,]*")
_INNER_MARK = re.compile(r"[0-9A-Za-z][_./:{}\-][0-9A-Za-z{}]")
_INNER_CAPITAL = re.compile(r"[a-z][A-Z]")
_ALL_CAPS = re.compile(r"[A-Z][A-Z0-9]+(?:[-_/][A-Z0-9]+)*s?")
_HEX = re.compile(r"#[0-9A-Fa-f]{3,8}")
_ABBREVIATION = re.compile(r"(?:[a-z]\.){1,3}[a-z]?")  # e.g, i.e, a.m
# Hyphenated English ("follow-up", "long-term") names nothing; "blue-green", "ng-spot-workers" do.
_ENGLISH_HYPHENATED = frozenset(
    {"follow", "up", "long", "short", "term", "well", "known", "real", "time", "self", "so", "called", "high",
     "low", "level", "full", "part", "day", "to", "end", "one", "two", "off", "on", "in", "out", "based",
     "like", "free", "side", "back", "front", "sign", "check", "set", "step", "by", "make", "sure", "up-to-date",
     "date", "co", "re", "pre", "non", "multi", "cross", "first", "hand", "built", "easy", "good", "top", "least",
     "most", "all", "at", "wide", "case", "the", "of", "a", "per", "over", "under", "year", "week", "month",
     "fine", "tuned", "open", "source", "read", "only", "write", "opt", "add", "run", "user", "facing", "made",
     "hands", "ready", "friendly", "minded", "going", "worth", "while", "day-to-day", "face", "person"}
)  # fmt: skip
# Capitalised words that open a clause without opening a sentence, or are capitalised everywhere.
_ALWAYS_CAPITALISED = frozenset({"I", "I'm", "I'll", "I've", "I'd", "OK", "A"})
_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "and",
        "or",
        "but",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "than",
        "then",
        "so",
        "if",
        "we",
        "you",
        "they",
        "he",
        "she",
        "i",
        "our",
        "your",
        "their",
        "his",
        "her",
        "my",
        "me",
        "us",
        "them",
        "about",
        "into",
        "over",
        "under",
        "up",
        "down",
        "out",
        "off",
        "per",
        "via",
        "each",
        "every",
        "all",
        "any",
        "some",
        "no",
        "not",
        "only",
        "just",
        "also",
        "very",
        "more",
        "most",
        "less",
        "least",
        "much",
        "many",
        "few",
        "one",
        "at",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "while",
        "before",
        "after",
        "since",
        "until",
        "because",
        "there",
        "here",
    ]
)
# Clauses that state something though no token in them is specific: they name or set a thing
# ("the queue is called payouts"), change one ("switched the loss to focal loss"), lay down a
# rule ("autosave never runs during combat", "employment is contingent on a check") or count
# in words ("within five business days").
_NAMING_CUE = re.compile(
    r"\b(?:named|called|labell?ed|set\s+(?:it\s+)?to|switch(?:ed|es|ing)?|moved?\s+to|defaults?\s+to|"
    r"stands?\s+for|goes?\s+to|go\s+with|went\s+with|settled\s+on|opted\s+for|chose|picked|decided|"
    r"replac(?:e|ed|es|ing)|migrat(?:e|ed|es|ing)|adopt(?:ed|s)?|(?:we|we'll|we\s+will|let's)\s+use|"
    r"is\s+due|deadline|limit|threshold|owner|owns|assigned|must|never|always|only\s+(?:if|when|after)|"
    r"required|requires|mandatory|contingent|triggers?|"
    r"two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|sixty|"
    r"hundred|thousand|dozen|half|twice|double)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Word:
    text: str
    opens_sentence: bool
    # Punctuation between this word and the next ("live? 0"): a number is not paired across it.
    closes_phrase: bool = False


def _trim(word: str) -> str:
    trimmed = word.lstrip(_TRIM_START).rstrip(_TRIM_END)
    if word.startswith("#") and _HEX.fullmatch(word.rstrip(_TRIM_END)):
        return word.rstrip(_TRIM_END)
    return trimmed


def _words(text: str) -> Iterator[Word]:
    """The words of ``text``, trimmed of surrounding punctuation, each knowing whether it opens a
    sentence (the first of a line or of a list item, or after ``. ! ? :``)."""
    for line in text.splitlines():
        line = _LINE_PREFIX.sub("", line)
        opens = True
        for raw in line.split():
            if raw.strip("|"):
                word = _trim(raw)
                if word:
                    yield Word(word, opens, closes_phrase=raw[-1] in ".,;:!?)]}\"'”’")
                opens = raw.rstrip("\"')]”’*").endswith((".", "!", "?", ":"))


def _hyphenated_english(word: str) -> bool:
    parts = word.split("-")
    return all(part.isalpha() and part.islower() for part in parts) and any(
        part in _ENGLISH_HYPHENATED for part in parts
    )


def capitalised(text: str) -> bool:
    """Whether ``text`` is a capital and lower-case letters (apostrophes too), in any alphabet: "Biscuit",
    "Sinéad", "Łódź", "Straße"."""
    return len(text) >= 2 and text[0].isupper() and all(c.islower() or c in "'’" for c in text[1:])


def is_specific(word: Word) -> bool:
    """Whether ``word`` names one thing (see the module docstring)."""
    text = word.text
    if any(c.isdigit() for c in text) or _HEX.fullmatch(text) or _INNER_CAPITAL.search(text):
        return True
    if _INNER_MARK.search(text):
        return not (_ABBREVIATION.fullmatch(text) or _hyphenated_english(text))
    if text in _ALWAYS_CAPITALISED:
        return False
    if len(text) >= 2 and _ALL_CAPS.fullmatch(text):
        return True
    return not word.opens_sentence and capitalised(text)


def _counted(words: list[Word], index: int) -> str:
    """A bare whole number with the noun it counts ("12 classes", "batch size 64"), when it has one."""
    number = words[index].text
    after = words[index + 1].text if index + 1 < len(words) and not words[index].closes_phrase else ""
    before = words[index - 1].text if index and not words[index - 1].closes_phrase else ""
    if after.isalpha() and after.casefold() not in _STOP_WORDS:
        return f"{number} {after}"
    if before.isalpha() and before.casefold() not in _STOP_WORDS:
        return f"{before} {number}"
    return number


# The clause functions below read the same texts again and again: a rollover ranks the clauses of up to 1,500
# messages of the history, mostly those of the session's previous rollover, and each clause is read by several
# rankings. Their results are kept for the texts last read, a message or a clause, up to a size: a longer text
# (an attached file) is read afresh, so that what is kept stays within tens of megabytes.
TEXTS_KEPT = 8192
KEPT_TEXT_CHARS = 2000
T = TypeVar("T")


def _kept(function: Callable[[str], T]) -> Callable[[str], T]:
    kept = lru_cache(maxsize=TEXTS_KEPT)(function)

    @wraps(function)
    def read(text: str) -> T:
        return kept(text) if len(text) <= KEPT_TEXT_CHARS else function(text)

    return read


@_kept
def specific_tokens(text: str) -> tuple[str, ...]:
    """Every specific token of ``text`` in order, each once: quoted and backticked text whole,
    then the words, a bare number with its noun."""
    found: dict[str, str] = {}
    text = _MARKER_SYNTAX.sub(" ", text)
    for match in _QUOTED.finditer(text):
        quoted = next(group for group in match.groups() if group is not None).strip()
        found.setdefault(quoted.casefold(), quoted)
    words = list(_words(text))
    for index, word in enumerate(words):
        if is_specific(word):
            token = _counted(words, index) if _WHOLE_NUMBER.fullmatch(word.text) else word.text
            found.setdefault(token.casefold(), token)
    return tuple(found.values())


def distinctive_words(texts: Iterable[str]) -> tuple[str, ...]:
    """The words of ``texts`` said in one of them only: lowercase, four letters or more, not a stop word
    (what "a pet's name", "a diagnosis", "a car" come down to in everyday talk, where few are capitalised)."""
    seen: dict[str, int] = {}
    for text in texts:
        for word in set(_PLAIN_LOWER.findall(text)) - _STOP:
            seen[word] = seen.get(word, 0) + 1
    return tuple(word for word, count in seen.items() if count == 1)


def reference_facts(texts: Iterable[str]) -> tuple[Fact, ...]:
    """The specific tokens of ``texts`` as facts of kind ``token`` and their distinctive words as
    facts of kind ``word``, each once: what a checkpoint's retention is measured against (``Retention.score``
    weighs the two kinds)."""
    texts = list(texts)
    found: dict[str, Fact] = {}
    for text in texts:
        for token in specific_tokens(text):
            found.setdefault(token.casefold(), Fact("token", token))
    for word in distinctive_words(texts):
        found.setdefault(word, Fact("word", word))
    return tuple(found.values())


def _cut_long(clause: str) -> Iterator[str]:
    if len(clause.split()) <= MAX_CLAUSE_WORDS:
        yield clause
        return
    yield from (piece for piece in _COMMA.split(clause) if piece)


@cache
def _segmenter() -> pysbd.Segmenter:
    return pysbd.Segmenter(language="en", clean=False)


def sentences(line: str) -> list[str]:
    """The sentences of one line of prose, by pysbd's rules: "Mr. Gitau's house", "St. Peter's",
    "5 p.m." and "v2.1" stay whole."""
    return [sentence.strip() for sentence in _segmenter().segment(line) if sentence.strip()] if line.strip() else []


@_kept
def split_clauses(text: str) -> tuple[str, ...]:
    """The clauses of ``text`` in order: its lines (code lines, goal marker lines and table rows
    whole, list and heading marks off), cut into sentences, then at semicolons and dashes, and long ones at commas."""
    clauses: list[str] = []
    in_code = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_code = not in_code
            continue
        if in_code:
            if line.strip():
                clauses.append(line.strip())
            continue
        if _TABLE_RULE.match(line):
            continue
        if parse_markers(line):  # "[DECISION] Use JWT - LOCKED" is read whole, as the goal markers are
            clauses.append(line.strip())
            continue
        line = _LINE_PREFIX.sub("", line).strip()
        if line.startswith("|"):
            clauses.append(" | ".join(cell.strip() for cell in line.strip("|").split("|") if cell.strip()))
            continue
        for sentence in sentences(line):
            for clause in _CLAUSE_END.split(sentence):
                clauses.extend(piece.strip() for piece in _cut_long(clause.strip()) if piece.strip())
    return tuple(clauses)


def states_fact(clause: str) -> bool:
    """Whether ``clause`` states a fact: it holds a specific token, a fact of the pattern table or a naming cue."""
    return bool(specific_tokens(clause)) or bool(_NAMING_CUE.search(clause)) or bool(extract_facts([clause]))


def fact_clauses(texts: Iterable[str]) -> tuple[str, ...]:
    """The fact-bearing clauses of ``texts`` in order, each once; goal marker lines are left to the
    goal and the checkpoint's decisions, files and next steps, which keep them already."""
    found: dict[str, str] = {}
    for text in texts:
        for clause in split_clauses(text):
            if states_fact(clause) and not parse_markers(clause):
                found.setdefault(" ".join(clause.casefold().split()), clause)
    return tuple(found.values())
