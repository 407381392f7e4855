"""Whether a model's text repeats itself: the loops a small model falls into without a repeat penalty.

SmolLM2-135M at temperature 0 can write one clause over and over until its
token cap. Three signs of a loop, each tuned so that ordinary summaries
(lists of facts, bullets that share a prefix such as "- Decided: use ...")
pass:

- the same line of ``LINE_WORDS`` or more words, ``LINE_REPEATS`` times;
- a unit shorter than a phrase (1 to ``PHRASE_WORDS - 1`` words) ``LOOP_REPEATS``
  times back to back ("padding padding padding padding");
- a phrase of ``PHRASE_WORDS`` or more words ``PHRASE_REPEATS`` times anywhere,
  not overlapping. Shared prefixes of lists are shorter than that ("the user
  asked about the", five words); a path counts as one word, so a list of files
  in the same folder is not a phrase.

Words are compared lowercased and without the punctuation around them.
``most_repeated_phrase`` gives the phrase repeated most for a phrase size of
one's choosing (``bench/loops.py`` counts replies with a 5-word phrase three
times).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

LINE_WORDS = 3
LINE_REPEATS = 3
PHRASE_WORDS = 6
PHRASE_REPEATS = 3
LOOP_REPEATS = 4
# The most words of a repeated phrase quoted in the reason.
QUOTED_WORDS = 8
_PUNCTUATION = "\"'`.,;:!?()[]{}<>*_#|~-–—•…“”‘’«»"


def _words(text: str) -> list[str]:
    return [word for word in (raw.strip(_PUNCTUATION).lower() for raw in text.split()) if word]


def _quote(words: Sequence[str]) -> str:
    shown = " ".join(words[:QUOTED_WORDS])
    return f"“{shown} …”" if len(words) > QUOTED_WORDS else f"“{shown}”"


def repetition(text: str) -> str | None:
    """Why ``text`` repeats itself, in a few words ("a phrase of 9 words repeated 5 times: “…”"),
    or None when it does not."""
    words = _words(text)
    return _repeated_line(text) or _loop(words) or _repeated_phrase(words)


def _repeated_line(text: str) -> str | None:
    counts: dict[tuple[str, ...], int] = defaultdict(int)
    for line in text.splitlines():
        words = _words(line)
        if words and words[0].isdigit():  # "1. ...", "2. ...": the numbering is not the line
            words = words[1:]
        if len(words) >= LINE_WORDS:
            counts[tuple(words)] += 1
    repeated, count = max(counts.items(), key=lambda item: item[1], default=((), 0))
    if count >= LINE_REPEATS:
        return f"a line repeated {count} times: {_quote(repeated)}"
    return None


def _loop(words: Sequence[str]) -> str | None:
    """A unit of fewer than ``PHRASE_WORDS`` words that follows itself ``LOOP_REPEATS`` times or more."""
    for size in range(1, PHRASE_WORDS):
        run = best = best_at = 0
        # A unit of ``size`` words repeats back to back where each word equals the one ``size`` later.
        for index in range(len(words) - size):
            run = run + 1 if words[index] == words[index + size] else 0
            if run > best:
                best, best_at = run, index - run + 1
        copies = best // size + 1
        if copies >= LOOP_REPEATS:
            unit = words[best_at : best_at + size]
            return f"{_quote(unit)} repeated {copies} times in a row"
    return None


@dataclass(frozen=True)
class RepeatedPhrase:
    words: tuple[str, ...]
    count: int


def most_repeated_phrase(text: str, *, words: int = PHRASE_WORDS) -> RepeatedPhrase | None:
    """The phrase of ``words`` or more words that ``text`` repeats most often (repeats that do not
    overlap), grown while every repeat goes on with the same words; None when none comes twice."""
    return _most_repeated(_words(text), words)


def _most_repeated(words: Sequence[str], size: int) -> RepeatedPhrase | None:
    starts: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for index in range(len(words) - size + 1):
        found = starts[tuple(words[index : index + size])]
        if not found or index >= found[-1] + size:
            found.append(index)
    positions = max(starts.values(), key=len, default=[])
    if len(positions) < 2:
        return None
    # Grow the phrase while every repeat goes on with the same word and the repeats do not overlap.
    longest = min([b - a for a, b in itertools.pairwise(positions)] + [len(words) - positions[-1]])
    while size < longest and len({words[at + size] for at in positions}) == 1:
        size += 1
    return RepeatedPhrase(tuple(words[positions[0] : positions[0] + size]), len(positions))


def _repeated_phrase(words: Sequence[str]) -> str | None:
    """The phrase of ``PHRASE_WORDS`` or more words with the most non-overlapping repeats, if enough."""
    found = _most_repeated(words, PHRASE_WORDS)
    if found is None or found.count < PHRASE_REPEATS:
        return None
    return f"a phrase of {len(found.words)} words repeated {found.count} times: {_quote(found.words)}"
