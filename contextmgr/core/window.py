"""The context window: what the next call sends, block by block.

Order, as in the spec: the system prompt (with the pinned goal block and
locked decisions), then the checkpoints oldest first, then the active
messages (every user message and the assistant messages not yet compressed).
The checkpoints travel inside the single system message, because many chat
templates honour only one system message; the blocks stay separate so they
can be shown and counted one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from contextmgr.core.aging import Level
from contextmgr.core.budget import Budget
from contextmgr.core.ledger import render_ledger

BLOCK_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class CheckpointView:
    number: int
    level: Level
    range_label: str
    summary: str
    key_decisions: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    ledger: tuple[str, ...] = ()


def render_checkpoint(checkpoint: CheckpointView) -> str:
    """A checkpoint as the model reads it; its token count is this text's."""
    lines = [
        f"[Checkpoint {checkpoint.number} · {checkpoint.range_label} · {checkpoint.level.label}]",
        checkpoint.summary,
    ]
    if checkpoint.key_decisions:
        lines.append("Decisions: " + "; ".join(checkpoint.key_decisions))
    if checkpoint.files_modified:
        lines.append("Files: " + ", ".join(checkpoint.files_modified))
    if checkpoint.next_steps:
        lines.append("Next: " + "; ".join(checkpoint.next_steps))
    if checkpoint.ledger:
        lines.append(render_ledger(checkpoint.ledger))
    return "\n".join(lines)


def render_system(system_prompt: str, pinned: str) -> str:
    """The user's system prompt followed by the pinned block (goal, locked decisions)."""
    return BLOCK_SEPARATOR.join(part for part in (system_prompt.strip(), pinned) if part)


@dataclass(frozen=True)
class WindowBlock:
    kind: Literal["system", "checkpoint", "message"]
    role: str
    content: str
    tokens: int
    ref: int | None = None


@dataclass(frozen=True)
class ActiveMessage:
    id: int
    role: str
    content: str
    tokens: int


def assemble_window(
    *,
    system: str,
    system_tokens: int,
    checkpoints: Sequence[tuple[int, str, int]],
    messages: Sequence[ActiveMessage],
) -> tuple[WindowBlock, ...]:
    """Blocks in prompt order; ``checkpoints`` are ``(id, rendered text, tokens)`` oldest first."""
    blocks = [WindowBlock("system", "system", system, system_tokens)]
    blocks += [WindowBlock("checkpoint", "system", text, tokens, ref) for ref, text, tokens in checkpoints]
    blocks += [WindowBlock("message", m.role, m.content, m.tokens, m.id) for m in messages]
    return tuple(blocks)


def window_budget(blocks: Sequence[WindowBlock], *, max_tokens: int) -> Budget:
    """The budget the window's own counts make: what is read block by block for the prompt needs no
    second reading to know whether a compression is due."""
    return Budget(
        max_tokens=max_tokens,
        system_prompt_tokens=sum(b.tokens for b in blocks if b.kind == "system"),
        checkpoint_tokens=sum(b.tokens for b in blocks if b.kind == "checkpoint"),
        active_tokens=sum(b.tokens for b in blocks if b.kind == "message"),
    )


def chat_messages(blocks: Sequence[WindowBlock]) -> list[tuple[str, str]]:
    """``(role, content)`` pairs to send: system and checkpoint blocks joined into one system message,
    none when they say nothing (an empty one would still be a turn the model reads)."""
    head = BLOCK_SEPARATOR.join(b.content for b in blocks if b.kind != "message" and b.content)
    return [("system", head)] * bool(head) + [(b.role, b.content) for b in blocks if b.kind == "message"]
