"""A session's short title (issue 47): the prompt that asks a small model for one, what its answer
is cleaned to, and the fallback taken from the first message when the answer is no title."""

from __future__ import annotations

import re

# Long enough for a few words; a sidebar line shows about this much.
TITLE_MAX_CHARS = 60
# What the title prompt quotes of the first message and of the first reply.
QUOTED_CHARS = 400
TITLE_MAX_TOKENS = 20
# A branch's title: its parent's, with where it branched.
BRANCH_SUFFIX = " (branch at message {position})"

_PREFIX = re.compile(r"^\s*(?:title|subject|topic)\s*[:\-–—]\s*", re.IGNORECASE)
_MARKUP = re.compile(r"[*_`#>\[\]]+")
_QUOTES = "\"'“”‘’«»`"
_SPACE = re.compile(r"\s+")
# Answers that are no title: a refusal, the prompt said back, a bare punctuation line.
_NOT_A_TITLE = re.compile(
    r"^(?:i(?:'m| am)? (?:sorry|cannot|can't|can not)|as an ai|sorry\b|certainly\b)|"
    r"^(?:sure|okay|ok|here(?:'s| is).*|a short title|title)\W*$",
    re.IGNORECASE,
)


def title_prompt(first_message: str, first_reply: str) -> str:
    """The one user message that asks for the title: short and plain, for a 135M model."""
    message = _SPACE.sub(" ", first_message).strip()[:QUOTED_CHARS]
    reply = _SPACE.sub(" ", first_reply).strip()[:QUOTED_CHARS]
    return (
        "Write a short title, three to six words, for this conversation. "
        "Answer with the title only.\n\n"
        f"User: {message}\nAssistant: {reply}\n\nTitle:"
    )


def _shorten(text: str) -> str:
    """At most TITLE_MAX_CHARS, cut at a word when one ends close enough."""
    if len(text) <= TITLE_MAX_CHARS:
        return text
    cut = text[: TITLE_MAX_CHARS + 1]
    space = cut.rfind(" ")
    return (cut[:space] if space >= TITLE_MAX_CHARS // 2 else cut[:TITLE_MAX_CHARS]).rstrip(" ,;:-")


def clean_title(answer: str) -> str:
    """The model's answer as a title: its first non-empty line, without a "Title:" prefix, quotes,
    markdown or a final full stop, on one line of at most TITLE_MAX_CHARS; "" when nothing usable is
    left (then ``fallback_title``)."""
    line = next((line for line in answer.splitlines() if line.strip()), "")
    line = _MARKUP.sub("", _PREFIX.sub("", line))
    line = _SPACE.sub(" ", line).strip().strip(_QUOTES).strip()
    line = line.rstrip(".").strip().strip(_QUOTES).strip()
    if not re.search(r"\w", line) or _NOT_A_TITLE.search(line):
        return ""
    return _shorten(line)


def fallback_title(first_message: str, *, words: int = 6) -> str:
    """The first words of the first message, as a title."""
    text = _SPACE.sub(" ", _MARKUP.sub("", first_message)).strip()
    head = " ".join(text.split(" ")[:words]).strip(_QUOTES + " .,;:")
    return _shorten(head)


def branch_title(parent_title: str, position: int, *, limit: int) -> str:
    """A branch's title: ``<parent title> (branch at message N)``, the parent's cut so it fits ``limit``."""
    suffix = BRANCH_SUFFIX.format(position=position)
    return parent_title[: max(limit - len(suffix), 0)].rstrip() + suffix
