"""What a conversation said that is worth keeping, and in which order: any conversation, not only
a technical one.

*Said clauses* (``said_clauses``) are the ledger's candidates: the clauses of the messages that
state something (a fact of the pattern table or a specific token, ``core.clauses``, or a plain
statement with enough words of its own: "my sister is a nurse", "we moved from leeds"), never
a question, a greeting, thanks or a reaction ("Haha, that's great!"). Each is headed with the
day it was said and who said it, and its relative dates are made absolute (``core.dates``), so
that "last Saturday" still means something once its message has left the context.

*Salience* (``salience_order``) ranks them: the words a clause holds that are rare in the
conversation (inverse document frequency over the candidates) and new against what is already
kept (a word kept once, or standing in the context beside the ledger, weighs a quarter after), for
what the clause costs; a specific token (a name, a number) counts six times. The order is greedy:
each pick lowers the weight of its words in the clauses left.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date

from bm25s.stopwords import STOPWORDS_EN_PLUS

from engine.core.clauses import capitalised, specific_tokens, split_clauses, states_fact
from engine.core.dates import date_text, resolve_relative_dates
from engine.core.markers import parse_markers
from engine.core.retention import Fact

# A word of a specific token (a name, a number, an identifier) weighs this much more than another word.
SPECIFIC_WEIGHT = 6.0
# A word already kept weighs this much in the clauses that follow: new information goes first.
KEPT_WEIGHT = 0.25
# A statement with fewer words of its own than this says too little to keep ("I agree", "so much fun").
MIN_CONTENT_WORDS = 2
STOP_WORDS = frozenset(STOPWORDS_EN_PLUS) | frozenset(
    {"i'm", "i've", "i'd", "i'll", "it's", "that's", "there's", "what's", "let's", "can't", "don't", "im", "ive",
     "also", "really", "pretty", "quite", "bit", "lot", "lots", "much", "many", "even", "still", "though", "yet",
     "like", "get", "got", "gets", "getting", "go", "going", "went", "gone", "make", "made", "know", "think",
     "thought", "one", "thing", "things", "way", "well", "oh", "ah", "um", "yeah", "yes", "ok", "okay", "sure",
     "would", "could", "might", "must", "shall", "may", "us", "gonna", "wanna", "kind", "sort", "maybe",
     "actually", "probably", "definitely", "totally", "literally", "honestly", "anyway", "right"}
)  # fmt: skip
# Words that open a clause that greets, thanks or reacts to someone: the name beside them is no news.
GREETINGS = frozenset(
    {"hi", "hey", "hello", "heya", "hiya", "morning", "evening", "thanks", "thank", "thx", "cheers", "haha",
     "hahaha", "lol", "lmao", "wow", "whoa", "omg", "aw", "aww", "awww", "yay", "woohoo", "congrats",
     "congratulations", "bye", "goodbye", "night", "ugh", "oof", "ooh", "aha", "hehe"}
)  # fmt: skip
# Words of small talk: a clause made of them (and a name or two) says nothing new.
SMALL_TALK = GREETINGS | frozenset(
    {"ok", "okay", "sure", "yes", "yeah", "yep", "no", "nope", "nah", "cool", "nice", "great", "awesome",
     "amazing", "lovely", "sweet", "later", "hmm", "oh", "ah", "absolutely", "totally", "exactly", "true",
     "agreed", "same", "glad", "sorry", "good", "sounds",
     "that's", "thats", "so", "fair", "welcome", "take", "talk", "see", "catch", "miss", "love", "hope", "enjoy",
     "happy", "have", "well", "right", "definitely"}
)  # fmt: skip
# Words that make a statement a general one (how things usually go, what is worth doing) rather than
# something that happened or holds here: such a clause without a specific token of its own is advice
# or filler, which nobody asks about later.
GENERAL_WORDS = frozenset(
    {"often", "usually", "generally", "typically", "tend", "tends", "always", "sometimes", "rarely", "seldom",
     "commonly", "normally", "worth"}
)  # fmt: skip
# A general clause weighs this much of what its words would give it.
GENERAL_WEIGHT = 0.25
_WORD = re.compile(r"[^\W_][\w'’-]*")
_SAID = re.compile(r"\[(?P<said>[^\[\]\n]{1,48})\] (?P<text>.+)", re.DOTALL)


@dataclass(frozen=True)
class Said:
    """A message as the ledger reads it: who said it, when, and what."""

    role: str
    content: str
    said_on: date | None = None


def said_header(role: str, said_on: date | None) -> str:
    """ "20 May 2023, user": what heads an entry ("" when neither is known)."""
    return ", ".join(part for part in (date_text(said_on) if said_on else "", role) if part)


def split_said(text: str) -> tuple[str | None, str]:
    """A ledger entry's header ("20 May 2023, user") and its clause; no header for an entry written
    before entries had one."""
    match = _SAID.fullmatch(text)
    return (match["said"], match["text"]) if match else (None, text)


def _words(text: str) -> list[str]:
    return [word.casefold().replace("’", "'") for word in _WORD.findall(text)]


def content_words(text: str) -> list[str]:
    """The words of ``text`` that carry its meaning: not stop words, not one letter."""
    return [word for word in _words(text) if len(word) > 1 and word not in STOP_WORDS]


def small_talk(clause: str) -> bool:
    """Whether ``clause`` asks, greets, thanks or reacts rather than says something."""
    if clause.rstrip().rstrip(")\"'”’").endswith("?"):
        return True
    words = _words(clause)
    content = [word for word in words if word not in STOP_WORDS and word not in SMALL_TALK and len(word) > 1]
    if words and words[0] in GREETINGS:
        return len(content) < MIN_CONTENT_WORDS + 1
    return len(content) < MIN_CONTENT_WORDS


def _technical(clause: str) -> bool:
    """Whether ``clause`` holds a value a greeting never does: a number, a path, an identifier (a
    capitalised name alone does not count: "Hey Mel!")."""
    return any(not capitalised(token) for token in specific_tokens(clause))


def chit_chat(clause: str) -> bool:
    """Whether ``clause`` asks, greets, thanks or reacts, and holds no value a greeting never does:
    "Morning Noreen!", "Did the parade go ahead on Friday?" (not "Is the port 5432?")."""
    return small_talk(clause) and not _technical(clause)


def states_something(clause: str) -> bool:
    """Whether ``clause`` states a fact of the pattern table or enough words of its own."""
    return states_fact(clause) or len(content_words(clause)) >= MIN_CONTENT_WORDS


def said_clauses(messages: Sequence[Said]) -> tuple[Fact, ...]:
    """The ledger's candidates from ``messages`` (oldest first), each once: their clauses that
    state a fact or something of the speaker's own, headed with when and by whom, with their
    relative dates made absolute. Goal marker lines are left to the goal and the checkpoint's
    fields, which keep them already."""
    found: dict[str, Fact] = {}
    for message in messages:
        for clause in split_clauses(message.content):
            if parse_markers(clause) or chit_chat(clause) or not states_something(clause):
                continue
            if message.said_on is not None:
                clause = resolve_relative_dates(clause, message.said_on)
            key = " ".join(clause.casefold().split())
            header = said_header(message.role, message.said_on)
            if key not in found:
                found[key] = Fact("clause", f"[{header}] {clause}" if header else clause)
    return tuple(found.values())


def _weights(text: str) -> dict[str, float]:
    """Each content word of an entry's clause, a specific token's words counted twice."""
    _, clause = split_said(text)
    specific = {word for token in specific_tokens(clause) for word in _words(token)}
    return {word: SPECIFIC_WEIGHT if word in specific else 1.0 for word in content_words(clause)}


def _general(text: str) -> bool:
    """Whether an entry's clause says how things generally go, with no specific token of its own."""
    _, clause = split_said(text)
    return not specific_tokens(clause) and not GENERAL_WORDS.isdisjoint(_words(clause))


def salience_order(
    facts: Sequence[Fact],
    *,
    cost: Callable[[str], int],
    first: Callable[[Fact], bool] = lambda fact: False,
    beside: str = "",
) -> list[int]:
    """The indexes of ``facts`` (oldest first), most salient first; those ``first`` picks lead, in
    their order. ``beside``: what stays in the context beside them (the newest messages), whose words
    are kept already: a clause that says it again is no news. Age does not count, but to break a
    tie: what was said first is asked about as often as what was said last."""
    weights = [_weights(fact.text) for fact in facts]
    frequency = Counter(word for words in weights for word in words)
    rarity = {word: math.log(1 + len(facts) / count) for word, count in frequency.items()}
    prices = [max(1, cost(fact.text)) for fact in facts]
    factors = [GENERAL_WEIGHT if _general(fact.text) else 1.0 for fact in facts]
    kept = set(content_words(beside)) & frequency.keys()

    def score(index: int) -> float:
        value = sum(w * rarity[word] * (KEPT_WEIGHT if word in kept else 1.0) for word, w in weights[index].items())
        return factors[index] * value / prices[index]

    leading = [index for index, fact in enumerate(facts) if first(fact)]
    for index in leading:
        kept.update(weights[index])
    # Lazy greedy: a stale score can only be too high, so a popped entry is re-scored and
    # taken when it still beats the next best.
    # Between equal scores the newer goes first: a value said again later ("the port is now 6379") holds.
    heap = [(-score(index), -index) for index in range(len(facts)) if index not in set(leading)]
    heapq.heapify(heap)
    order = list(leading)
    while heap:
        _, negated = heapq.heappop(heap)
        index = -negated
        fresh = score(index)
        if heap and (-fresh, negated) > heap[0]:
            heapq.heappush(heap, (-fresh, negated))
            continue
        order.append(index)
        kept.update(weights[index])
    return order
