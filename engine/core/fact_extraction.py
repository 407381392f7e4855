"""Key facts of a text, extracted without the LLM, each as the verbatim span of the text it comes from.

The kinds: decisions (goal markers and "we'll use X"), file and directory paths, URLs, hosts (host names,
regions, domains, IPs), technical identifiers (flags, environment variables, snake/camel/Pascal/kebab names,
ticket ids), numbers with units, versions, dates and times, names of people, code spans, quoted strings and
what the other goal markers name. Each extractor is a precise pattern rather than a guess: ordinary English
words, sentence-initial capitals and bare numbers are never facts. Where spans overlap, the longest wins (a URL
over the host inside it, a quoted error over the path it names).

The word lists (extensions, products, units, first names...) are data in ``core.fact_words``; the patterns that
use them are here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from engine.core import fact_words
from engine.core.markers import ArtifactRecord, DecisionUpdate, NextStep, parse_markers
from engine.core.retention import Fact, FactKind, normalize, word_character

MAX_FACT_CHARS = 120
MAX_FACTS = 200


def _alternatives(patterns: tuple[str, ...]) -> str:
    return "|".join(patterns)


_EXTENSIONS = _alternatives(fact_words.EXTENSIONS_PATTERNS)
_TLDS = _alternatives(fact_words.TLDS_PATTERNS)
_AZURE_REGIONS = _alternatives(fact_words.AZURE_REGIONS_PATTERNS)
_DIRECTIONS = _alternatives(fact_words.DIRECTIONS_PATTERNS)
_PRODUCTS = _alternatives(fact_words.PRODUCTS_PATTERNS)
_MONTHS_FULL = _alternatives(fact_words.MONTHS_PATTERNS)
_MONTHS = _MONTHS_FULL + "|" + _alternatives(fact_words.MONTH_ABBREVIATIONS_PATTERNS)
_WEEKDAYS = _alternatives(fact_words.WEEKDAYS_PATTERNS)
_TIMEZONES = _alternatives(fact_words.TIMEZONES_PATTERNS)
_UNITS = _alternatives(fact_words.UNITS_PATTERNS)
_PER = _alternatives(fact_words.PER_PATTERNS)
_CONTEXT_NOUNS = _alternatives(fact_words.CONTEXT_NOUNS_PATTERNS)
_ROLE_AFTER = _alternatives(fact_words.ROLE_AFTER_PATTERNS)
_ROLE_BEFORE = _alternatives(fact_words.ROLE_BEFORE_PATTERNS)
_ROOT_DIRS = frozenset(fact_words.ROOT_DIRS)
_HOST = frozenset(fact_words.HOST_WORDS)
_TECH_SUFFIXES = frozenset(fact_words.TECH_SUFFIXES)
_TECH_PREFIXES = frozenset(fact_words.TECH_PREFIXES)
# Hyphenated English that a technical context ("the follow-up job") must not turn into an identifier.
_ENGLISH_PREFIXES = frozenset(fact_words.ENGLISH_PREFIXES)
_STOP_OBJECTS = frozenset(fact_words.STOP_OBJECTS)
# First names that are people and nothing else. A name that is also a word or a product ("Dev", "Max",
# "Ruby") counts only as part of a full name or in a role context ("ask Dev", "Max approved").
_FIRST_NAMES = frozenset(fact_words.FIRST_NAMES)
_AMBIGUOUS_NAMES = frozenset(fact_words.AMBIGUOUS_NAMES)
# Capitalized words that are not the surname in "First Last" nor a name on their own.
_CAPITALIZED = frozenset(fact_words.CAPITALIZED_WORDS)

# --- patterns ---------------------------------------------------------------------------------
# Python's regex engine skips ahead quickly only to a literal or a character class at the
# start of a pattern, so the patterns start with one (a digit, a capital, "/", "-") and put
# their lookbehind after it; those that must start with a lowercase word run only on a text
# that has what they need (a "_", a "-", a known extension).

_D = "[0-9]"
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]{1,15}://[^\s<>\"'`)\]]+")
_CODE = re.compile(r"`(?<!``)([^`\n]{2,80})`(?!`)")
_QUOTE = re.compile(r"\"(?=[^\s\"])([^\"\n]{3,80})(?<=[^\s\"])\"|“([^”\n]{3,80})”")
_PLAIN_WORD = re.compile(r"[A-Za-z][a-z]*")
_SHORT_PATH = re.compile(r"[\w.~-]+/[\w./-]*")
# Searched in the lowercased text (a case-insensitive pattern cannot skip ahead quickly).
_DECISION_VERB = re.compile(
    r"(?:use|decided\s+on|go(?:ing)?\s+with|went\s+with|settled\s+on|opted\s+for|chose|picked|"
    r"switch(?:ed|ing)?\s+to|migrat(?:e|ed|ing)\s+to|mov(?:e|ed|ing)\s+to)[ \t]+"
    r"([a-z0-9][\w.+#/-]*(?:[ \t]+[a-z0-9][\w.+#/-]*)?)"
)
_NAME = re.compile(
    r"[A-Z](?<![\w.'-][A-Z])[a-zà-ÿ]+(?:-[A-Z][a-zà-ÿ]+)?(?:[ \t]+"
    r"((?:(?:van|von|de|da|di|del|der|le|la|al|bin|ben)[ \t]+)?(?:O'|Mc|Mac)?[A-Z][a-zà-ÿ]+(?:-[A-Z][a-zà-ÿ]+)?))?"
    r"(?![\w'-]|[ \t]+[A-Z][a-z])"
)
_TITLE = re.compile(r"(?:Dr|Mr|Mrs|Ms|Prof)\.?[ \t]+$")
_ROLE_AFTER_RE = re.compile(rf"(?:'s\s+team|,?\s+(?:{_ROLE_AFTER})\b)")
_ROLE_BEFORE_RE = re.compile(rf"(?:^|[\s(,;])(?:{_ROLE_BEFORE})\s*$", re.I)
_WEEKDAY_BEFORE = re.compile(r"\b(?:on|by|until|till|next|this|last|before|after|every|from)\s+$")
_KEBAB_BEFORE = re.compile(rf"(?:\b(?:{_CONTEXT_NOUNS})\s+(?:called\s+|named\s+)?)$", re.I)
_KEBAB_AFTER = re.compile(rf"\s+(?:{_CONTEXT_NOUNS})\b", re.I)
_SURNAME_LIKE = re.compile(r"(?:Mc|Mac|De|Di|Da|Du|La|Le|Van|Von)[A-Z][a-z]+")

# A rule: its kind, what a text must hold for it to run (a substring or a quick pattern),
# the pattern, and whether its match must start at a word boundary.
_Gate = str | re.Pattern[str] | None
_DIGIT = re.compile(_D)
_NUM = rf"{_D}(?:[.,]?{_D})*"
_RULES: tuple[tuple[FactKind, _Gate, re.Pattern[str], bool], ...] = (
    # paths
    ("path", "/", re.compile(r"(?<![\w/.])(?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]{1,6}\b"), False),
    (
        "path",
        re.compile(rf"\.(?:{_EXTENSIONS})\b"),
        re.compile(rf"(?<![\w/.-])[\w-]+\.(?:{_EXTENSIONS})\b(?![\w-]|\.\w)"),
        False,
    ),
    ("path", "/", re.compile(r"(?<![\w/.:~@-])(?:~|\.\.?)?/[\w.+@-]+(?:/[\w.+@-]+)*/?"), False),
    ("path", "/", re.compile(r"(?<![\w/.:~@-])[A-Za-z_.][\w.-]*(?:/[\w.-]+){2,}/?"), False),
    ("path", "/", re.compile(r"(?<![\w/.:~@-])[A-Za-z_][\w.-]*(?:/[\w.-]+)+/(?=[\s,;:)]|$)"), False),
    (
        "path",
        None,
        re.compile(
            r"\.(?<![\w/.]\.)(?:env|gitignore|dockerignore|bashrc|zshrc|profile|npmrc|editorconfig)(?:\.\w+)?\b"
        ),
        False,
    ),
    (
        "path",
        "file",
        re.compile(r"(?:Dockerfile|Makefile|Procfile|Jenkinsfile|Gemfile|Vagrantfile|Containerfile|Justfile)\b"),
        True,
    ),
    ("path", ":\\", re.compile(r"[A-Z]:\\(?:[\w.-]+\\)*[\w.-]+"), True),
    # hosts
    (
        "host",
        _DIGIT,
        re.compile(rf"{_D}(?<![\w.]{_D}){_D}{{0,2}}(?:\.{_D}{{1,3}}){{3}}(?:/{_D}{{1,2}}|:{_D}{{2,5}})?\b(?!\.{_D})"),
        False,
    ),
    (
        "host",
        re.compile(rf"\.(?:{_TLDS})\b"),
        re.compile(
            rf"(?<![\w.@/-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.)+(?:{_TLDS})(?::{_D}{{2,5}})?\b"
            r"(?![\w-]|\.\w)"
        ),
        False,
    ),
    (
        "host",
        re.compile(rf"-(?:{_DIRECTIONS})-?{_D}"),
        re.compile(
            rf"(?:(?:us|eu|ap|sa|ca|me|af|il|mx|cn)(?:-gov|-iso[bf]?)?-(?:{_DIRECTIONS})-{_D}[a-f]?"
            rf"|(?:us|europe|asia|australia|northamerica|southamerica|me|africa)-(?:{_DIRECTIONS}){_D}{{1,2}}(?:-[a-f])?)"
            r"\b(?!-)"
        ),
        True,
    ),
    ("host", re.compile("east|west|north|south|central"), re.compile(rf"(?:{_AZURE_REGIONS})\b"), True),
    # dates and times
    (
        "date",
        "-",
        re.compile(
            rf"{_D}(?<!\w{_D}){_D}{{3}}-{_D}{{2}}-{_D}{{2}}"
            rf"(?:[T ]{_D}{{2}}:{_D}{{2}}(?::{_D}{{2}})?(?:Z|[+-]{_D}{{2}}:?{_D}{{2}})?)?(?:\s?(?:{_TIMEZONES})\b)?"
        ),
        False,
    ),
    ("date", _DIGIT, re.compile(rf"{_D}(?<![\w./]{_D}){_D}?[/.]{_D}{{1,2}}[/.]{_D}{{4}}\b(?![./]{_D})"), False),
    (
        "date",
        _DIGIT,
        re.compile(rf"{_D}(?<!\w{_D}){_D}?(?:st|nd|rd|th)?(?:\s+of)?\s+(?:{_MONTHS})\b\.?(?:,?\s+{_D}{{4}}\b)?"),
        False,
    ),
    ("date", _DIGIT, re.compile(rf"(?:{_MONTHS})\.?\s+{_D}{{1,2}}(?:st|nd|rd|th)?\b(?!:)(?:,?\s+{_D}{{4}}\b)?"), True),
    ("date", _DIGIT, re.compile(rf"(?:{_MONTHS_FULL})\s+{_D}{{4}}\b"), True),
    ("date", None, re.compile(rf"[QH][1-4](?:\s+{_D}{{4}}\b|/{_D}{{2,4}}\b)?(?![\w-])"), True),
    (
        "date",
        ":",
        re.compile(
            rf"{_D}(?<![0-9:.]{_D}){_D}?:{_D}{{2}}(?::{_D}{{2}})?(?:\s?(?:am|pm|AM|PM))?(?:\s?(?:{_TIMEZONES})\b)?(?![0-9:])"
        ),
        False,
    ),
    ("date", _DIGIT, re.compile(rf"{_D}(?<![\w.]{_D}){_D}?\s?(?:am|pm|AM|PM|a\.m\.|p\.m\.)(?!\w)"), False),
    # versions
    (
        "version",
        _DIGIT,
        re.compile(rf"v(?<![\w.]v){_D}+(?:\.{_D}+){{0,3}}(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?\b(?!\.{_D})"),
        False,
    ),
    (
        "version",
        _DIGIT,
        re.compile(
            rf"{_D}(?<![\w.]{_D}){_D}*\.{_D}+\.{_D}+(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?:\+[0-9A-Za-z.]+)?\b(?!\.{_D})"
        ),
        False,
    ),
    (
        "version",
        re.compile(rf"[=~<>!]=|@[~^]?{_D}"),
        re.compile(rf"[A-Za-z][\w.-]*(?:==|>=|<=|~=|!=|@\^?|@~){_D}+(?:\.{_D}+){{0,2}}(?:\.\*)?\b(?![.:]?{_D})"),
        True,
    ),
    # identifiers
    ("identifier", "_", re.compile(r"[A-Z](?<![\w$][A-Z])[A-Z0-9]*(?:_[A-Z0-9]+)+\b"), False),
    ("identifier", "_", re.compile(r"(?<![\w$.])[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b(?!\.\w)"), False),
    (
        "identifier",
        re.compile(r"[A-Z](?<=[a-z0-9][A-Z])"),
        re.compile(r"(?<![\w$.])[a-z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b(?!\.\w)"),
        False,
    ),
    ("identifier", None, re.compile(r"[A-Z](?<![\w$.][A-Z])[a-z]+(?:[A-Z][a-z0-9]+)+\b"), False),
    ("identifier", None, re.compile(r"[A-Z](?<![\w$.][A-Z])[a-z]+(?:[A-Z][a-z0-9]+)*[A-Z]{2,}[a-z]?\b"), False),
    ("identifier", None, re.compile(r"--(?<![\w-]--)[a-z][a-z0-9]*(?:-[a-z0-9]+)*"), False),
    ("identifier", "-", re.compile(rf"[A-Z](?<![\w-][A-Z])[A-Z0-9]{{1,9}}-{_D}+\b(?!-)"), False),
    ("identifier", _DIGIT, re.compile(rf"(?:PR|MR|[Ii]ssue|[Tt]icket|[Bb]ug|[Ii]ncident)\s?#?{_D}+\b"), True),
    ("identifier", None, re.compile(rf"#(?<![\w&#]#){_D}{{3,}}\b"), False),
    ("identifier", "-", re.compile(r"(?<![\w-])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), False),
    (
        "identifier",
        re.compile(rf"[a-f](?<={_D}[a-f])|{_D}(?<=[a-f]{_D})"),
        re.compile(rf"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*{_D})[0-9a-f]{{7,40}}\b(?!-)"),
        False,
    ),
    ("identifier", "@", re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"), False),
    ("identifier", None, re.compile(r"\$\{?[A-Z][A-Z0-9_]+\}?"), False),
    (
        "identifier",
        re.compile(r"\.(?<=[a-z0-9_]\.)[A-Za-z_]"),
        re.compile(r"(?<![\w./@-])[a-z_][a-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]+)+(?:\(\))?(?![\w/]|\.\w)"),
        False,
    ),
    ("identifier", "()", re.compile(r"(?<![\w.])[A-Za-z_]\w*\(\)"), False),
    # numbers
    (
        "number",
        _DIGIT,
        re.compile(rf"{_D}(?<![\w.,:#-]{_D})(?:[.,]?{_D})*\s?(?:{_UNITS})(?:\s?(?:/|per\s)\s?(?:{_PER}))?(?![\w/])"),
        False,
    ),
    ("number", _DIGIT, re.compile(rf"{_D}(?<![\w.,:#-]{_D})(?:[.,]?{_D})*\s?(?:/|per\s)\s?(?:{_PER})\b"), False),
    (
        "number",
        _DIGIT,
        re.compile(
            rf"[$€£](?<![\w.,][$€£])\s?{_NUM}(?:\s?(?:k|K|M|bn|million|billion))?(?:\s?(?:/|per\s)\s?(?:{_PER}))?(?![\w])"
        ),
        False,
    ),
    ("number", _DIGIT, re.compile(rf"[Pp]ort\s+{_D}{{2,5}}\b"), True),
)
_DASHED_HOST = re.compile(rf"(?<![\w./@-])[a-z][a-z0-9]*(?:-[a-z0-9]+)*-{_D}+(?::{_D}{{2,5}})?(?![\w-]|\.\w)")
_INNER_HYPHEN = re.compile(r"-(?<=[a-z0-9]-)[a-z0-9]")
_KEBAB = re.compile(r"(?<![\w./@-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![\w-]|\.\w)")
_WEEKDAY = re.compile(rf"(?:{_WEEKDAYS})s?\b")
# "Python 3.11", "version 3.2": the number first (a fast search), then the name before it.
_NAMED_NUMBER = re.compile(rf"{_D}(?<=[\sv]{_D}){_D}*(?:\.{_D}+){{0,3}}\b(?!\.{_D}|\s?(?:{_UNITS})(?![\w/]))")
_PRODUCT_BEFORE = re.compile(rf"(?<![\w.])(?:{_PRODUCTS})\s+v?$")
_KEYWORD_BEFORE = re.compile(r"(?<![\w.])(?:[Vv]ersion|[Rr]elease|[Rr]ev)\s+v?$")

_Span = tuple[int, int, FactKind, str]
# For spans of the same length, the earlier kind wins.
_RANK: dict[str, int] = {
    kind: rank
    for rank, kind in enumerate(
        (
            "marker",
            "url",
            "code",
            "quote",
            "decision",
            "path",
            "host",
            "date",
            "version",
            "identifier",
            "number",
            "name",
        )
    )
}


def _open(gate: _Gate, text: str) -> bool:
    if gate is None:
        return True
    if isinstance(gate, str):
        return gate in text
    return gate.search(text) is not None


def _word_start(text: str, start: int) -> bool:
    return start == 0 or not word_character(text[start - 1])


def _ruled(text: str) -> Iterator[_Span]:
    opened: dict[int, bool] = {}  # several rules share a gate: each is tried once
    for kind, gate, pattern, bounded in _RULES:
        if (is_open := opened.get(id(gate))) is None:
            is_open = opened[id(gate)] = _open(gate, text)
        if is_open:
            for match in pattern.finditer(text):
                if not bounded or _word_start(text, match.start()):
                    yield match.start(), match.end(), kind, match.group(0)


def _filtered(text: str) -> Iterator[_Span]:
    for start, end, kind, span in _ruled(text):
        if kind == "path":
            parts = span.strip("/").split("/")
            # "/tmp" is a path, "/day" is not: one absolute segment must be a well-known root.
            if span.startswith("/") and len(parts) == 1 and parts[0] not in _ROOT_DIRS:
                continue
        elif kind == "identifier" and _SURNAME_LIKE.fullmatch(span):
            continue  # McDonald, DeShawn: people, not PascalCase names
        yield start, end, kind, span


def _dashed(text: str) -> Iterator[_Span]:
    """Hosts ``db-billing-01``, ``web-03`` (not ``covid-19``, ``utf-8``) and identifiers ``billing-api``,
    ``checkout-worker``; a plain hyphenated word only where it names a service, flag, repo."""
    if _INNER_HYPHEN.search(text) is None:
        return
    for match in _DASHED_HOST.finditer(text):
        parts = match.group(0).split(":")[0].split("-")
        if len(parts) >= 3 or parts[0] in _HOST or parts[-1].startswith("0"):
            yield match.start(), match.end(), "host", match.group(0)
    for match in _KEBAB.finditer(text):
        start, end = match.span()
        parts = match.group(0).split("-")
        if parts[0] in _ENGLISH_PREFIXES:
            continue
        technical = parts[-1] in _TECH_SUFFIXES or parts[0] in _TECH_PREFIXES
        if technical or _KEBAB_BEFORE.search(text[max(0, start - 40) : start]) or _KEBAB_AFTER.match(text, end):
            yield start, end, "identifier", match.group(0)


def _weekdays(text: str) -> Iterator[_Span]:
    """ "on Friday", "every Monday": a weekday after a preposition of time."""
    for match in _WEEKDAY.finditer(text):
        if _WEEKDAY_BEFORE.search(text[max(0, match.start() - 8) : match.start()]):
            yield match.start(), match.end(), "date", match.group(0)


def _named_versions(text: str) -> Iterator[_Span]:
    if not _DIGIT.search(text):
        return
    for match in _NAMED_NUMBER.finditer(text):
        start, end = match.span()
        before = text[max(0, start - 24) : start]
        named = _PRODUCT_BEFORE.search(before)
        if named is None and match.group(0).count(".") <= 1 and not re.match(r"[.0-9-]", text[end : end + 1]):
            named = _KEYWORD_BEFORE.search(before)
        if named is not None:
            yield start - len(named.group(0)), end, "version", text[start - len(named.group(0)) : end]


def _names(text: str) -> Iterator[_Span]:
    """People: "Dev Patel", "Maria", "Dr. Okafor"; a name that is also a word ("Dev", "Max") or that no
    list knows only in a role ("ask Dev", "Max approved", "cc Ngozi")."""
    for match in _NAME.finditer(text):
        start, end = match.span()
        first, last = match.group(0).split()[0], match.group(1)
        if last is not None and first in _CAPITALIZED:
            # "Then Maria", "Ask Dev": the second word on its own.
            if " " in last:
                continue
            (start, end), first, last = match.span(1), last, None
        elif last is not None and last.split()[-1] in _CAPITALIZED:
            end, last = start + len(first), None  # "Maria Thanks": the first name alone
        if first in _CAPITALIZED:
            continue
        title = _TITLE.search(text[max(0, start - 6) : start])
        before = _ROLE_BEFORE_RE.search(text[max(0, start - 40) : start]) is not None
        in_role = before or _ROLE_AFTER_RE.match(text, end) is not None
        known = first in _FIRST_NAMES or title is not None
        if last is not None:
            person = known or first in _AMBIGUOUS_NAMES or in_role
        else:
            person = known or (first in _AMBIGUOUS_NAMES and in_role) or before
        if person:
            if title:
                start -= len(title.group(0))
            yield start, end, "name", text[start:end]


def _decisions(text: str) -> Iterator[_Span]:
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lowercase is longer: keep the positions right
        lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    for match in _DECISION_VERB.finditer(lowered):
        if not _word_start(text, match.start()):
            continue
        words = text[match.start(1) : match.end(1)].split()
        if words[0][-1] in ".,;:!?":
            words = words[:1]  # the object ends with its sentence
        while words and words[-1].casefold().rstrip(".,;:!?") in _STOP_OBJECTS:
            words.pop()
        if words and words[0].casefold().rstrip(".,;:!?") not in _STOP_OBJECTS:
            end = match.start(1) + text[match.start(1) : match.end(1)].index(words[-1]) + len(words[-1])
            span = text[match.start() : end].rstrip(".,;:")
            yield match.start(), match.start() + len(span), "decision", span


def _specific(text: str) -> Iterator[_Span]:
    """Every candidate of the kinds that name one thing (everything but code spans, quotes and decisions)."""
    yield from _filtered(text)
    yield from _dashed(text)
    yield from _weekdays(text)
    yield from _named_versions(text)
    yield from _names(text)


def _refined(content: str, default: FactKind) -> FactKind | None:
    """The kind of a code span's or quote's content: a single path, host, identifier... is that kind;
    a single plain word in quotes is no fact."""
    whole = [kind for start, end, kind, _ in _specific(content) if start == 0 and end == len(content.rstrip(".,;:"))]
    if whole:
        return min(whole, key=_RANK.__getitem__)
    if _SHORT_PATH.fullmatch(content):
        return "path"  # `deploy/`, `charts/billing`: in a code span, one slash is enough
    if default == "quote" and _PLAIN_WORD.fullmatch(content):
        return None
    return default


def _wrapped(pattern: re.Pattern[str], default: FactKind, text: str) -> Iterator[_Span]:
    for match in pattern.finditer(text):
        group = 1 if match.group(1) is not None else 2
        kind = _refined(match.group(group), default)
        if kind is not None:
            yield match.start(group), match.end(group), kind, match.group(group)


def _candidates(text: str) -> Iterator[_Span]:
    for update in parse_markers(text):
        if isinstance(update, DecisionUpdate):
            kind: FactKind = "decision"
            said = update.description
        elif isinstance(update, ArtifactRecord):
            kind, said = "path", update.path
        elif isinstance(update, NextStep):
            kind, said = "marker", update.text
        else:
            continue
        start = text.find(said)
        # A marker's description claims its place in the text, so nothing inside it is counted twice.
        yield (start, start + len(said), kind, said) if start >= 0 else (-1, -1, kind, said)
    if "://" in text:
        yield from ((m.start(), m.end(), "url", m.group(0)) for m in _URL.finditer(text))
    yield from _wrapped(_CODE, "code", text)
    yield from _wrapped(_QUOTE, "quote", text)
    yield from _decisions(text)
    yield from _specific(text)


def _facts_of(text: str) -> list[tuple[int, FactKind, str]]:
    """The facts of one text in order of appearance: where spans overlap, the longest (then the
    earlier kind in ``_RANK``) wins."""
    candidates = sorted(
        (c for c in _candidates(text) if len(c[3].strip()) <= MAX_FACT_CHARS),
        key=lambda c: (-(c[1] - c[0]), _RANK[c[2]], c[0]),
    )
    taken = bytearray(len(text) + 1)
    chosen: list[tuple[int, FactKind, str]] = []
    for start, end, kind, span in candidates:
        if start < 0:
            chosen.append((start, kind, span))
        elif not any(taken[start:end]):
            taken[start:end] = b"\x01" * (end - start)
            chosen.append((start, kind, span))
    return sorted(chosen, key=lambda c: c[0])


def extract_facts(texts: Iterable[str]) -> tuple[Fact, ...]:
    """Every key fact of ``texts``, in order of appearance, each once (the first kind found wins)."""
    found: dict[str, Fact] = {}
    for text in texts:
        for _, kind, span in _facts_of(text):
            span = span.strip().rstrip(".,;:")
            key = normalize(span)
            if len(key) >= 2 and key not in found:
                if len(found) == MAX_FACTS:
                    return tuple(found.values())
                found[key] = Fact(kind, span)
    return tuple(found.values())
