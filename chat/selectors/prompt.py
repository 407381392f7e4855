"""The prompt the next call sends, block by block, as the context window page and the API show it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from chat.gateway import get_gateway
from chat.models import Session
from chat.selectors.context import active_checkpoints, active_messages, pinned_block, session_window
from engine.core.aging import Level
from engine.core.budget import prompt_room
from engine.core.recall import Recall
from engine.core.tokens import TokenCount
from engine.core.window import WindowBlock, prompt_messages
from engine.llm import ChatMessage, Gateway, LLMError
from engine.resources import count_text_tokens


@dataclass(frozen=True)
class PromptBlock:
    kind: Literal["system", "goal", "checkpoint", "message", "recall", "draft"]
    role: str
    content: str
    tokens: int
    title: str = ""  # how the context window viewer names it


PINNED_TITLE = "Pinned: goal, locked decisions, artifacts"


@dataclass(frozen=True)
class Prompt:
    blocks: tuple[PromptBlock, ...]
    total_tokens: int
    exact: bool
    # The most the prompt may take and leave the reply its reserve (``prompt_room``).
    room_tokens: int
    recall: Recall = field(default_factory=Recall)  # what a draft recalled (``session_prompt_for``)

    @property
    def fits(self) -> bool:
        """Whether the turn sends this prompt as it stands. When it does not, the turn compresses
        (or rolls over) before it asks the model, which then sees less than this (``prompt_with_room``)."""
        return self.total_tokens <= self.room_tokens

    @property
    def budget_tokens(self) -> int:
        """The blocks' stored counts added up: what the budget, and so the meter, count as used.
        ``total_tokens`` (the model's reading of the message list) differs from it by what no block
        holds: the chat template's markers around the system message and the reply, the
        separators between the joined system blocks, and a tokenizer other than cl100k for the
        system prompt and the pinned block."""
        return sum(block.tokens for block in self.blocks)


def session_prompt(*, session: Session, gateway: Gateway | None = None) -> Prompt:
    """What the next call sends, block by block, with the system prompt and the pinned goal block apart.

    The system, goal and checkpoint blocks travel joined as one system message;
    ``total_tokens`` counts that message list as the model will (exactly on the
    embedded model, the calibrated estimate with its margin on Ollama).
    """
    window = session_window(session=session)
    pinned = pinned_block(session=session)
    head = [
        PromptBlock("system", "system", session.system_prompt.strip(), session.system_prompt_tokens, "System prompt")
    ]
    if pinned:
        head.append(PromptBlock("goal", "system", pinned, count_text_tokens(pinned), PINNED_TITLE))
    checkpoints = {cp.id: cp for cp in active_checkpoints(session=session)}
    positions = dict(active_messages(session=session).values_list("id", "position"))

    def title(block: WindowBlock) -> str:
        if block.kind == "checkpoint" and block.ref in checkpoints:
            cp = checkpoints[block.ref]
            return f"Checkpoint #{cp.number} · {cp.range_label} · {Level(cp.level).display}"
        return f"#{positions.get(block.ref or 0, '?')} {block.role}"

    blocks = (
        *head,
        *(PromptBlock(b.kind, b.role, b.content, b.tokens, title(b)) for b in window if b.kind != "system"),
    )
    try:
        count = (gateway or get_gateway()).count_prompt(
            [ChatMessage.of(m) for m in prompt_messages(window)], session.model
        )
    except LLMError:
        # No backend can count for this model now: the stored counts are the best estimate.
        count = TokenCount(sum(b.tokens for b in window), exact=False)
    return Prompt(
        blocks=blocks, total_tokens=count.tokens, exact=count.exact, room_tokens=prompt_room(session.max_tokens)
    )
