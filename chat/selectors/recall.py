"""Reads for recall: the old messages of a session that a new message asks about (``engine.core.recall``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace

from django.conf import settings
from django.db.models import Count, Max

from chat.gateway import get_gateway
from chat.models import Message, Session
from chat.selectors.context import session_window
from chat.selectors.prompt import Prompt, PromptBlock, session_prompt
from engine.core.config import reply_max_tokens
from engine.core.recall import Recall, RecallCandidate, RecallIndex, recall, recall_budget, recall_index, with_recall
from engine.core.text import plural
from engine.core.window import prompt_messages
from engine.llm import ChatMessage, Gateway, LLMError
from engine.resources import count_text_tokens

DRAFT_TITLE = "Your draft (not sent)"
# A draft travels in a URL (``?draft=``): longer ones are refused with a clear error.
DRAFT_MAX_CHARS = 20_000
# The sessions whose history index this process keeps: building one reads and stems every message that
# left the context, which a turn of a long session would otherwise pay each time.
INDEXES_KEPT = 32
_indexes: OrderedDict[object, tuple[tuple[object, ...], RecallIndex]] = OrderedDict()
_indexes_lock = threading.Lock()


def session_recall(*, session: Session, query: str, prompt_tokens: int) -> Recall:
    """What the session's history brings back for ``query`` in a prompt of ``prompt_tokens``: its messages
    that left the context through a compression (not the versions a regeneration or an edit replaced, nor
    what a restored snapshot left out), within what the prompt leaves beside the reply's cap."""
    budget = recall_budget(
        max_tokens=session.max_tokens,
        prompt_tokens=prompt_tokens,
        reply_tokens=reply_max_tokens(session.max_tokens, settings.OLLM_REPLY_MAX_TOKENS),
    )
    if budget <= 0 or not query.strip():
        return Recall()
    return recall(query, _history_index(session), budget_tokens=budget, cost=count_text_tokens)


def _history_index(session: Session) -> RecallIndex:
    """The index of the session's messages that left the context, built again only when that set has
    changed: every change of a message's context state (compressed, restored, excluded, edited) stamps
    it with the session's new ``context_version``, so the count and the newest stamp tell."""
    left = Message.objects.filter(session=session, compressed_into__isnull=False, excluded_from_context=False).exclude(
        role=Message.Role.TOOL
    )
    signature = tuple(left.aggregate(count=Count("id"), version=Max("context_version"), newest=Max("id")).values())
    with _indexes_lock:
        cached = _indexes.get(session.pk)
        if cached is not None and cached[0] == signature:
            _indexes.move_to_end(session.pk)
            return cached[1]
    rows = left.order_by("position").values_list("id", "position", "role", "content", "created_at")
    index = recall_index(
        [
            RecallCandidate(id=pk, position=position, role=role, content=content, said_on=created_at.date())
            for pk, position, role, content, created_at in rows
            if content.strip()
        ]
    )
    with _indexes_lock:
        _indexes[session.pk] = (signature, index)
        _indexes.move_to_end(session.pk)
        while len(_indexes) > INDEXES_KEPT:
            _indexes.popitem(last=False)
    return index


def session_prompt_for(*, session: Session, draft: str, gateway: Gateway | None = None) -> Prompt:
    """The prompt the next turn would send for ``draft``: the context as it stands, then what the
    history recalls for it, then the draft. Nothing is stored and the model is not asked; a draft that
    would make a compression due is shown before it (the turn compresses first)."""
    gateway = gateway or get_gateway()
    prompt = session_prompt(session=session, gateway=gateway)
    found = session_recall(session=session, query=draft, prompt_tokens=prompt.total_tokens + count_text_tokens(draft))
    recalled = [
        PromptBlock(
            "recall",
            "user",
            found.text,
            count_text_tokens(with_recall(found, draft)) - count_text_tokens(draft),
            f"Recall: {plural(len(found.items), 'message')} of the history, for the words of your draft",
        )
    ] * bool(found.items)
    blocks = (*prompt.blocks, *recalled, PromptBlock("draft", "user", draft, count_text_tokens(draft), DRAFT_TITLE))
    messages = [ChatMessage.of(m) for m in prompt_messages(session_window(session=session))]
    try:
        count = gateway.count_prompt([*messages, ChatMessage("user", with_recall(found, draft))], session.model)
        total, exact = count.tokens, count.exact
    except LLMError:
        total, exact = sum(block.tokens for block in blocks), False
    return replace(prompt, blocks=blocks, total_tokens=total, exact=exact, recall=found)
