"""Room in the prompt for a turn's reply.

A turn's prompt must leave at least ``REPLY_MIN_TOKENS`` for the reply. Until it does, the turn waits
for a running compression, or runs one, or rolls over; extractively, without the model, when the model
failed the compression or it takes too long. A user message that can never fit leaves the context.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connections

from chat.models import Message, Session
from chat.selectors.context import session_config, session_last_event_id, session_window
from chat.selectors.recall import session_recall
from chat.services.compression import (
    CompressionOutcome,
    compression_failure_since,
    compression_run,
    compression_running,
    compression_wait_blocking,
)
from chat.services.events import recall_record
from chat.services.revisions import message_leave_context
from chat.services.turn.driver import Driver, Hear
from engine.core.backoff import seconds_text
from engine.core.budget import REPLY_MIN_TOKENS, prompt_room
from engine.core.recall import with_recall
from engine.core.text import plural
from engine.core.tokens import TokenCount
from engine.core.window import WindowBlock, prompt_messages
from engine.llm import ChatMessage, ContextOverflow, Gateway, LLMError
from engine.llm.hosts import OnQueued

WAITING_FOR_COMPRESSION = "waiting for the compression to finish…"
THINKING = "thinking…"


def queued_text(ahead: int, waited: float) -> str:
    """A turn's place in its host's queue and the time it has waited there, as the page shows it."""
    return f"queued for the model: {plural(ahead, 'request')} ahead · waiting {int(waited)} s"


def queue_reporter(on_wait: Hear | None) -> OnQueued | None:
    """The gateway's ``on_queued`` for a turn: ``on_wait`` hears the turn's place in the queue and the
    seconds it has waited, every second while it waits (the queue's tick), then "thinking…" once it runs."""
    if on_wait is None:
        return None
    since: float | None = None

    async def on_queued(ahead: int) -> None:
        nonlocal since
        if not ahead:
            on_wait(THINKING)
            return
        since = time.monotonic() if since is None else since
        on_wait(queued_text(ahead, time.monotonic() - since))

    return on_queued


COMPRESSING_FOR_ROOM = "compressing to make room for the reply…"
EXTRACTIVE_AFTER_FAILURE = "the model's compression failed; compressing extractively to make room…"
EXTRACTIVE_AFTER_WAIT = "the compression is taking too long; compressing extractively to make room…"


def _compress_now(**options: Any) -> CompressionOutcome:
    """A compression in a worker thread of its own, which must not keep a database connection open."""
    try:
        return compression_run(**options)
    finally:
        connections.close_all()


def _does_not_fit(session: Session, tokens: int) -> ContextOverflow:
    return ContextOverflow(
        f"Your message does not fit: the prompt would be {tokens:,} tokens and the context holds "
        f"{session.max_tokens:,}, with {REPLY_MIN_TOKENS} kept for the reply. It is kept in the full history "
        "but left out of the context; shorten it or choose a larger context size."
    )


# The ways to make room, in order: each at most once; the model's while it has not failed, then
# the extract's (``compression_run(extractive=...)``).
_MAKING_ROOM = (("compress", False), ("compress", True), ("rollover", False), ("rollover", True))


@dataclass
class _Room:
    """What a turn has tried to make room for its reply."""

    tried: set[tuple[str, bool]] = field(default_factory=set)
    # Why the model cannot be counted on to make the room; then the extract does.
    model_failed: str | None = None
    # The last failure of a compression the turn ran, in a sentence.
    failed: str | None = None
    # The turn has waited its fill for a running compression: the extractive one takes over its lease.
    take_over: bool = False

    def next(self) -> tuple[str, bool] | None:
        for way in _MAKING_ROOM:
            if way not in self.tried and way[1] == (self.model_failed is not None):
                return way
        return None


def prompt_with_room(
    session: Session,
    gateway: Gateway,
    user_message: Message,
    blocks: tuple[WindowBlock, ...] | None,
    on_wait: Hear | None,
    driver: Driver,
) -> tuple[list[ChatMessage], TokenCount]:
    """The next prompt, once it leaves at least REPLY_MIN_TOKENS for the reply; ``blocks``: the
    window as just read, if it was.

    A running compression is waited for (``OLLM_COMPRESSION_TURN_WAIT_SECONDS`` at most; Stop
    ends the wait at its next look). Else the turn compresses (in a worker thread, which Stop leaves
    to finish on its own), then rolls over. When the model fails the compression, or the running
    one outlasts the wait, the extract makes the room instead, without the model (taking the
    session's lease from a compression stuck on it). A user message that cannot fit however much
    is compressed leaves the context (it stays in the history) so the turns after it are not
    squeezed by it.
    """
    room = prompt_room(session.max_tokens)
    wait_seconds = settings.OLLM_COMPRESSION_TURN_WAIT_SECONDS
    deadline = time.monotonic() + wait_seconds
    state = _Room()
    said = ""

    def say(why: str) -> None:
        nonlocal said
        if on_wait is not None and why != said:
            said = why
            on_wait(why)

    while True:
        if blocks is None:
            blocks = session_window(session=session)
        messages = [ChatMessage.of(m) for m in prompt_messages(blocks)]
        count = gateway.count_prompt(messages, session.model)
        if count.tokens <= room:
            return messages, count
        blocks = None  # what follows changes the window, or waits for it to change
        config = session_config(session)
        if not config.compression.enabled:
            raise ContextOverflow(
                f"The prompt would be {count.tokens:,} tokens, more than this session's context of "
                f"{session.max_tokens:,} leaves room for, and compression is turned off for it. Your message "
                "is saved: turn compression on, choose a larger context size, or start a new session."
            )
        # Read before looking, so that the outcome of the compression found running is after it.
        since = session_last_event_id(session=session)
        if not state.take_over and compression_running(session_id=session.pk):
            say(WAITING_FOR_COMPRESSION)
            ended = compression_wait_blocking(
                session_id=session.pk,
                timeout=max(deadline - time.monotonic(), 0),
                interrupted=lambda: driver.stop.stopped,
            )
            driver.stop.check()
            if not ended:
                state.model_failed = f"the model's compression did not finish within {seconds_text(wait_seconds)}"
                state.take_over = True
            elif failure := compression_failure_since(session_id=session.pk, after_event_id=since):
                state.model_failed = f"the model's compression failed ({failure})"
            continue
        way = state.next()
        if way is None:
            if state.failed is not None:
                # Not the message's fault: it stays in the context, and Retry tries again.
                raise LLMError(f"could not make room for a reply: {state.failed}; your message is saved")
            message_leave_context(message=user_message)
            raise _does_not_fit(session, count.tokens)
        state.tried.add(way)
        mode, extractive = way
        if not extractive:
            say(COMPRESSING_FOR_ROOM)
        else:
            say(EXTRACTIVE_AFTER_WAIT if state.take_over else EXTRACTIVE_AFTER_FAILURE)
        options: dict[str, Any] = {
            "session_id": session.pk,
            "reason": "no room for a reply",
            "force": True,
            "gateway": gateway,
            "rollover": mode == "rollover",
            "extractive": state.model_failed if extractive else None,
            "take_over": state.take_over and extractive,
        }
        outcome = driver.in_thread(functools.partial(_compress_now, **options))
        state.take_over = False
        state.failed = None
        if outcome.status == "error":
            if extractive:
                state.failed = f"the extractive compression failed ({outcome.reason})"
            else:
                state.model_failed = f"the model's compression failed ({outcome.reason})"
                state.failed = state.model_failed


def prompt_with_recall(
    session: Session, gateway: Gateway, user_message: Message, messages: list[ChatMessage], count: TokenCount
) -> tuple[list[ChatMessage], TokenCount]:
    """The prompt with what the full history recalls for the user's new message placed just before
    it, within what the prompt leaves beside the reply's cap; the prompt as it was when nothing is
    recalled, or when the prompt does not end with the user's message (a continued reply, tool results).
    A recall is recorded as an event, with what was recalled and why."""
    if not messages or messages[-1].role != "user" or user_message.role != Message.Role.USER:
        return messages, count
    found = session_recall(session=session, query=user_message.content, prompt_tokens=count.tokens)
    if not found.items:
        return messages, count
    recalled = [*messages[:-1], dataclasses.replace(messages[-1], content=with_recall(found, messages[-1].content))]
    recounted = gateway.count_prompt(recalled, session.model)
    if recounted.tokens > prompt_room(session.max_tokens):
        return messages, count  # the estimate missed: the reply's room comes first
    recall_record(session=session, message=user_message, found=found)
    return recalled, recounted


def refuse_if_it_can_never_fit(session: Session, user_message: Message) -> None:
    """A message that alone (with the system prompt) leaves no room for a reply leaves the context
    at once, before any compression is scheduled: compressing the rest could never make room."""
    tokens = user_message.tokens + session.system_prompt_tokens
    if tokens > prompt_room(session.max_tokens):
        message_leave_context(message=user_message)
        raise _does_not_fit(session, tokens)
