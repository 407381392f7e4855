"""Which messages a compression takes.

Only assistant messages and tool outputs are compressed, oldest first; the
newest ``preserve_recent`` tokens of the conversation stay as they are. User
and system messages are never selected. A tool call and its results share a
``group`` and are taken together or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Role = Literal["user", "assistant", "system", "tool"]
COMPRESSIBLE_ROLES: frozenset[str] = frozenset({"assistant", "tool"})


@dataclass(frozen=True)
class ContextMessage:
    """A message of the active context, oldest first in any sequence."""

    id: int
    role: Role
    tokens: int
    group: str | None = None


@dataclass(frozen=True)
class Selection:
    message_ids: tuple[int, ...]
    tokens: int

    def __bool__(self) -> bool:
        return bool(self.message_ids)


def preserved_tail_start(messages: Sequence[ContextMessage], preserve_recent: int) -> int:
    """Index of the first message of the preserved tail: the newest messages whose tokens fit ``preserve_recent``."""
    kept = 0
    start = len(messages)
    for index in range(len(messages) - 1, -1, -1):
        kept += messages[index].tokens
        if kept > preserve_recent:
            break
        start = index
    return start


def select_for_compression(messages: Sequence[ContextMessage], *, preserve_recent: int) -> Selection:
    """The compressible messages older than the preserved tail, oldest first.

    ``preserve_recent`` should already be capped to the budget
    (``config.effective_preserve_recent``).
    """
    tail_start = preserved_tail_start(messages, preserve_recent)
    # A group with any member that may not be compressed (user text, system,
    # or in the preserved tail) stays whole in the context.
    blocked_groups = {
        message.group
        for index, message in enumerate(messages)
        if message.group is not None and (index >= tail_start or message.role not in COMPRESSIBLE_ROLES)
    }
    chosen = [
        message
        for message in messages[:tail_start]
        if message.role in COMPRESSIBLE_ROLES and (message.group is None or message.group not in blocked_groups)
    ]
    return Selection(message_ids=tuple(m.id for m in chosen), tokens=sum(m.tokens for m in chosen))
