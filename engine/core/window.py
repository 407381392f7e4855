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
from dataclasses import dataclass, replace
from typing import Any, Literal

from engine.core.aging import Level
from engine.core.budget import Budget
from engine.core.ledger import render_ledger

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
    """A block of the window; a ``tool`` message's is a tool call (``tool_name``, ``tool_args``, linked to
    its result by ``tool_call_id``) and its result (``content``, empty until the client sends it)."""

    kind: Literal["system", "checkpoint", "message"]
    role: str
    content: str
    tokens: int
    ref: int | None = None
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: Any = None


@dataclass(frozen=True)
class ActiveMessage:
    id: int
    role: str
    content: str
    tokens: int
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: Any = None


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
    blocks += [
        WindowBlock("message", m.role, m.content, m.tokens, m.id, m.tool_call_id, m.tool_name, m.tool_args)
        for m in messages
    ]
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


@dataclass(frozen=True)
class PromptCall:
    """A tool call as the prompt carries it, on the assistant message that made it."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class PromptMessage:
    """A message to send: ``chat_messages``' pair, with an assistant's tool calls or the call a tool result answers."""

    role: str
    content: str
    tool_calls: tuple[PromptCall, ...] = ()
    tool_call_id: str = ""
    tool_name: str = ""


def prompt_messages(blocks: Sequence[WindowBlock]) -> list[PromptMessage]:
    """``chat_messages`` as a model given tools reads them: the tool calls made together (consecutive stored
    tool entries) go on the assistant message before them (one without text when the message before is not
    the assistant's), then their results as ``tool`` messages in the same order; a call whose result has not
    come yet is the call alone. A tool message that names no tool (an imported result) stays as it was."""
    head = chat_messages([b for b in blocks if b.kind != "message"])
    messages = [PromptMessage(role, content) for role, content in head]
    results: list[PromptMessage] = []
    calling = False
    for block in (b for b in blocks if b.kind == "message"):
        if block.role != "tool" or not block.tool_name:
            messages += results
            results, calling = [], False
            messages.append(PromptMessage(block.role, block.content))
            continue
        if not calling and not (messages and messages[-1].role == "assistant" and not messages[-1].tool_calls):
            messages.append(PromptMessage("assistant", ""))
        calling = True
        call = PromptCall(block.tool_call_id, block.tool_name, block.tool_args)
        messages[-1] = replace(messages[-1], tool_calls=(*messages[-1].tool_calls, call))
        if block.content:
            results.append(
                PromptMessage("tool", block.content, tool_call_id=block.tool_call_id, tool_name=block.tool_name)
            )
    return messages + results
