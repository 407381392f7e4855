"""What a checkpoint stands for: the positions of the oldest and newest message it holds,
and, for one carried over from another session, where it came from.

Ranges are integers and are joined as integers (a merge or a rollover spans from the
oldest checkpoint's first message to the newest's last); the text the user sees, the
spec's ``"Messages 1-50"``, is made from them and never read back, except from a
snapshot written before ranges were integers (``range_from_label``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

CARRIED_OVER = "Carried over from “{title}”"
# How a carried-over checkpoint that also holds messages of its own session is shown.
THEN_MESSAGE = ", then message"
# Reads both "Messages 2-4" and one message's "Message 2" (written "Messages 2-2" before).
_LABEL = re.compile(r"(?:(?P<origin>.+), then messages?|Messages?) (?P<first>\d+)(?:-(?P<last>\d+))?", re.S)


@dataclass(frozen=True)
class MessageRange:
    """``first``..``last``: message positions in its session (both None when it holds none of
    them); ``origin``: what it stands for besides, such as a session it was carried over from."""

    first: int | None = None
    last: int | None = None
    origin: str = ""

    def __post_init__(self) -> None:
        if (self.first is None) != (self.last is None):
            raise ValueError("a message range has both ends or neither")
        if self.first is not None and self.last is not None and not 0 <= self.first <= self.last:
            raise ValueError(f"a message range runs forward from 0: {self.first}-{self.last}")

    @property
    def label(self) -> str:
        """The range as the page, the API and the prompt show it: ``Messages 2-9`` (``Message 2``
        for one), ``Carried over from “Plans”``, or ``Carried over from “Plans”, then messages 2-9``."""
        if self.first is None:
            return self.origin
        span = f"s {self.first}-{self.last}" if self.first != self.last else f" {self.first}"
        if not self.origin:
            return f"Message{span}"
        return f"{self.origin}{THEN_MESSAGE}{span}"


def carried_over(title: str) -> MessageRange:
    """What a session's first checkpoint stands for when it carries over the session ``title``."""
    return MessageRange(origin=CARRIED_OVER.format(title=title))


def join_ranges(ranges: Iterable[MessageRange]) -> MessageRange:
    """One range over ``ranges``: from the first message of any to the last of any, with every
    distinct origin, oldest first."""
    ranges = list(ranges)
    firsts = [r.first for r in ranges if r.first is not None]
    lasts = [r.last for r in ranges if r.last is not None]
    origin = "; ".join(dict.fromkeys(r.origin for r in ranges if r.origin))
    return MessageRange(min(firsts, default=None), max(lasts, default=None), origin)


def range_from_label(text: str) -> MessageRange:
    """The range a ``label`` shows; any other text is kept whole as the origin. Only for ranges
    that arrive as text (snapshots taken before ranges were integers)."""
    match = _LABEL.fullmatch(text)
    if match is None:
        return MessageRange(origin=text)
    first, last = int(match["first"]), int(match["last"] or match["first"])
    if first > last:
        return MessageRange(origin=text)
    return MessageRange(first, last, match["origin"] or "")
