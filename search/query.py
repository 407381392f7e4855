"""Turn what a user types into a safe full-text query for either engine.

The syntax is web-search-like: words, ``"quoted phrases"``, ``-excluded``
words and ``OR`` between two terms. Anything else (operators of FTS5 or
tsquery, brackets, stray quotes, control characters, very long input) is
reduced to plain words: the engines only ever see tokens made of letters and
digits, quoted by this module. Tokens are split like the indexes split text:
on everything that is not a letter or digit, so ``src/auth/login.ts`` becomes
the phrase ``src auth login ts``.

A bare word matches as a prefix (``auth`` finds ``authentication``); a quoted
phrase matches exactly; a word with punctuation inside (a path, an
identifier) is a phrase whose last word is a prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_QUERY_CHARS = 1000
MAX_TERMS = 16
MAX_TOKEN_CHARS = 64
MAX_TERM_TOKENS = 32

TOKEN_RE = re.compile(r"[^\W_]+")
# A quoted phrase (closed or running to the end), or a run of non-space characters.
PIECE_RE = re.compile(r'(-?)"([^"]*)"?|(\S+)')


@dataclass(frozen=True)
class Term:
    tokens: tuple[str, ...]
    prefix: bool


@dataclass(frozen=True)
class ParsedQuery:
    """All groups must match (each group: any of its terms); no excluded term may."""

    groups: tuple[tuple[Term, ...], ...] = ()
    excluded: tuple[Term, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.groups

    @property
    def terms(self) -> tuple[Term, ...]:
        """The terms a match may contain, each once (case aside): what a snippet marks. A term
        stays whole: ``eu-west-1`` marks that phrase, never every number that starts with 1."""
        unique = {(tuple(t.lower() for t in term.tokens), term.prefix): term for group in self.groups for term in group}
        return tuple(Term(tokens, prefix) for tokens, prefix in unique)


def tokens_of(text: str) -> list[str]:
    return [token[:MAX_TOKEN_CHARS] for token in TOKEN_RE.findall(text)][:MAX_TERM_TOKENS]


def parse_query(text: str) -> ParsedQuery:
    """Parse leniently: never raises, whatever the input."""
    text = (text or "")[:MAX_QUERY_CHARS]
    groups: list[list[Term]] = []
    excluded: list[Term] = []
    join_next = False
    count = 0
    for match in PIECE_RE.finditer(text):
        if count >= MAX_TERMS:
            break
        minus, quoted, bare = match.group(1), match.group(2), match.group(3)
        if bare is not None and bare == "OR":
            join_next = bool(groups)
            continue
        negate = False
        if quoted is not None:
            tokens = tokens_of(quoted)
            term = Term(tuple(tokens), prefix=False) if tokens else None
            negate = minus == "-"
        else:
            negate = bare.startswith("-") and len(bare) > 1
            tokens = tokens_of(bare[1:] if negate else bare)
            term = Term(tuple(tokens), prefix=True) if tokens else None
        if term is None:
            continue
        count += 1
        if negate:
            excluded.append(term)
            join_next = False
        elif join_next:
            groups[-1].append(term)
            join_next = False
        else:
            groups.append([term])
    return ParsedQuery(tuple(tuple(g) for g in groups), tuple(excluded))


def _fts5_term(term: Term) -> str:
    phrase = '"' + " ".join(term.tokens).replace('"', '""') + '"'
    return phrase + ("*" if term.prefix else "")


def fts5_query(query: ParsedQuery) -> str:
    """An FTS5 MATCH expression; precondition: the query is not empty."""
    groups = ["(" + " OR ".join(_fts5_term(t) for t in group) + ")" for group in query.groups]
    expression = "(" + " AND ".join(groups) + ")"
    for term in query.excluded:
        expression += " NOT " + _fts5_term(term)
    return expression


def _tsquery_term(term: Term) -> str:
    parts = ["'" + token.replace("'", "''").replace("\\", "") + "'" for token in term.tokens]
    if term.prefix:
        parts[-1] += ":*"
    return "(" + " <-> ".join(parts) + ")"


def tsquery(query: ParsedQuery) -> str:
    """A to_tsquery expression (tokens quoted, prefixes marked); precondition: the query is not empty."""
    groups = ["(" + " | ".join(_tsquery_term(t) for t in group) + ")" for group in query.groups]
    groups += ["!" + _tsquery_term(term) for term in query.excluded]
    return " & ".join(groups)
