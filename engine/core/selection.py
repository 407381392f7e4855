"""Which messages a compression takes.

Only assistant messages and tool outputs are compressed, oldest first; the
newest ``preserve_recent`` tokens of the conversation stay as they are. User
and system messages are never selected. A tool call and its results share a
``group`` and are taken together or not at all.

A rollover (``plan_rollover``) takes assistant and tool output first as well;
user messages leave the active context only when the never-compressed part
alone is at or over the trigger, and then the conversation goes oldest first
whatever the role, so the prompt keeps its newest exchanges whole. ``rollover_due`` says when a session that
compressed (or had nothing to compress) must roll over, ``select_for_rollover``
what a rollover takes, ``rollover_skip_reason`` why it has nothing to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from engine.core.budget import REPLY_MIN_TOKENS, TARGET_FILL, Budget, prompt_room

Role = Literal["user", "assistant", "system", "tool"]
COMPRESSIBLE_ROLES: frozenset[str] = frozenset({"assistant", "tool"})


@dataclass(frozen=True)
class ContextMessage:
    """A message of the active context, oldest first in any sequence."""

    id: int
    role: Role
    tokens: int
    group: str | None = None


def nothing_to_compress_reason(messages: Sequence[ContextMessage], *, preserve_recent: int) -> str:
    """Why select_for_compression took nothing from ``messages``, in figures a user can check."""
    yours = sum(m.tokens for m in messages if m.role not in COMPRESSIBLE_ROLES)
    tail = sum(m.tokens for m in messages[preserved_tail_start(messages, preserve_recent) :])
    replies = sum(m.tokens for m in messages) - yours
    return (
        f"nothing to compress: of the {yours + replies:,} tokens of messages in the context, {yours:,} are "
        f"yours or the system's (never compressed), and the {replies:,} of replies and tool output are within "
        f"the newest {tail:,} tokens, which compression keeps (up to {preserve_recent:,}), or tied to them "
        "(a tool call stays with its results)"
    )


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


@dataclass(frozen=True)
class RolloverPlan:
    """The messages a rollover moves behind its ultra checkpoint, oldest first.

    ``protected_tokens``: the part of the conversation no compression may take
    (user and system messages, the newest message and the tool groups tied to
    them); ``user_messages``: how many user messages leave the active context;
    ``goal_tokens`` and ``trigger_at``: what it was planned against.
    """

    message_ids: tuple[int, ...]
    tokens: int
    user_messages: int
    kept_tokens: int
    protected_tokens: int
    goal_tokens: int
    trigger_at: int

    def __bool__(self) -> bool:
        return bool(self.message_ids)


def _units(messages: Sequence[ContextMessage]) -> list[list[int]]:
    """The messages as the units a rollover moves: a tool call group together, anything else alone;
    in the order of each unit's first message."""
    units: list[list[int]] = []
    by_group: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        if message.group is None:
            units.append([index])
        elif message.group in by_group:
            by_group[message.group].append(index)
        else:
            by_group[message.group] = [index]
            units.append(by_group[message.group])
    return units


def plan_rollover(messages: Sequence[ContextMessage], *, goal_tokens: int, trigger_at: int) -> RolloverPlan:
    """What a rollover takes to bring the active conversation back to ``goal_tokens`` (half the trigger).

    Assistant and tool output goes, oldest first. User messages are taken only
    when the never-compressed part (``protected_tokens``) alone is at or over
    ``trigger_at``: then every message goes oldest first, whatever its role, only
    as many as needed, so that what stays is the newest stretch of the conversation
    with both sides of it (taking every reply first would leave the newest user
    messages answering replies the model no longer sees). The newest
    message (the one being answered) always stays, and a tool call group moves
    whole or not at all.
    """
    total = sum(m.tokens for m in messages)
    newest = len(messages) - 1
    units = [unit for unit in _units(messages) if newest not in unit]
    pinned = sum(messages[i].tokens for unit in _units(messages) if newest in unit for i in unit)

    def compressible(unit: list[int]) -> bool:
        return all(messages[i].role in COMPRESSIBLE_ROLES for i in unit)

    protected = pinned + sum(messages[i].tokens for unit in units if not compressible(unit) for i in unit)
    taken: list[int] = []
    candidates = units if protected >= trigger_at else [unit for unit in units if compressible(unit)]
    for unit in candidates:
        if total <= goal_tokens:
            break
        taken.extend(unit)
        total -= sum(messages[i].tokens for i in unit)
    chosen = [messages[i] for i in sorted(taken)]
    return RolloverPlan(
        message_ids=tuple(m.id for m in chosen),
        tokens=sum(m.tokens for m in chosen),
        user_messages=sum(1 for m in chosen if m.role == "user"),
        kept_tokens=total,
        protected_tokens=protected,
        goal_tokens=goal_tokens,
        trigger_at=trigger_at,
    )


def rollover_due(budget: Budget, *, reply_min: int = REPLY_MIN_TOKENS) -> bool:
    """Whether a session that has just compressed, or has nothing left to compress, must roll over
    now: its prompt leaves the reply less than its reserve, or it is still at its trigger."""
    return budget.used > prompt_room(budget.max_tokens, reply_min=reply_min) or budget.compression_due


def select_for_rollover(messages: Sequence[ContextMessage], budget: Budget, *, ultra_tokens: int) -> RolloverPlan:
    """What a rollover of the active ``messages`` takes (``plan_rollover``), planned against the
    trigger the session will have once its ultra checkpoint (``ultra_tokens``: its summary at its
    target and its ledger) stands in for the checkpoints, so that the rollover does not leave the
    conversation over its next trigger. The goal is the prompt at ``TARGET_FILL`` of the context
    (the newest messages fill what the memory leaves), and never under half that trigger."""
    after = replace(budget, checkpoint_tokens=max(budget.checkpoint_tokens, ultra_tokens))
    fill = int(budget.max_tokens * TARGET_FILL) - after.system_prompt_tokens - after.checkpoint_tokens
    return plan_rollover(messages, goal_tokens=max(after.trigger_at // 2, fill), trigger_at=after.trigger_at)


def rollover_skip_reason(plan: RolloverPlan, *, checkpoints: int) -> str | None:
    """Why a rollover that would take ``plan`` and merge ``checkpoints`` checkpoints has nothing to
    do, or None when it has something."""
    if plan or checkpoints:
        return None
    if plan.kept_tokens <= plan.goal_tokens:
        return "nothing to roll over: the conversation already fits in half the trigger"
    if plan.protected_tokens < plan.trigger_at:
        return (
            f"nothing to roll over: no assistant output to take, and the user messages "
            f"({plan.protected_tokens:,} tokens) are under the trigger ({plan.trigger_at:,})"
        )
    return "nothing to roll over: the newest message alone fills the context"
