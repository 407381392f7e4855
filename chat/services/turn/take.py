"""One chat turn, end to end, synchronously: ``turn_run`` returns the turn settled (``TurnOutcome``).

The user's message is stored first, before anything can fail. Then the turn
makes sure the prompt leaves room for a reply (``chat.services.turn.room``: waiting for a
running compression, or running one, or rolling over; extractively, without the
model, when the model failed the compression or it takes too long), streams the
reply with its length capped so prompt + reply never exceed ``num_ctx``, stores
it, applies its goal markers and schedules a compression when the budget says so. Last it settles:
the outcome holds the stored messages and the context as they stand once the turn is over (a
compression or a restore may have moved them meanwhile), and whether a compression still runs.

The core is plain synchronous code: the REST API and the drop-in calls that do not stream call it
as it is; ``chat.services.turn.shell`` runs it in a thread of its own for the websocket and the
streaming answers. The gateway streams asynchronously: the turn drives its stream (and the waits
Stop must cut short) on an event loop of its own (``_Driver``), which ``TurnStop`` cancels.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings

from chat.gateway import get_gateway
from chat.models import Message, Session
from chat.selectors.context import (
    ContextRead,
    ContextReport,
    context_report_with,
    session_and_last_event_id,
    session_context,
    session_context_read,
)
from chat.selectors.sessions import model_require_available, session_latest_message
from chat.services.compression import compression_maybe_schedule, compression_wait_blocking
from chat.services.counting import message_counter
from chat.services.goals import goal_apply_markers
from chat.services.lease import lease_held_on
from chat.services.messages import message_create
from chat.services.revisions import messages_supersede
from chat.services.sampling import reply_sampling
from chat.services.sessions import session_prompt_truncated
from chat.services.titles import session_title_schedule
from chat.services.turn.driver import Driver, Hear, TurnStop, TurnStopped
from chat.services.turn.room import (
    prompt_with_recall,
    prompt_with_room,
    queue_reporter,
    refuse_if_it_can_never_fit,
)
from chat.services.turn.variants import (
    TurnContinue,
    TurnRegenerate,
    TurnRetry,
    TurnVariant,
    count_text,
)
from engine.core.config import reply_max_tokens
from engine.core.tokens import TokenCount
from engine.llm import ChatRequest, ChatResult, Gateway, LLMError
from engine.llm.types import ChatStream, ReplyCut, ToolCall

logger = logging.getLogger(__name__)
# The ``done_reason`` of a reply its host failed in the middle of: the part that reached the user, kept.
REPLY_CUT = "error"
# Replies that never ended: their goal markers were never applied.
UNFINISHED = ("cancelled", REPLY_CUT)
# The core's listeners (plain calls, in the turn's thread): the reply as it streams, and the user's message once stored.
OnStoredMessage = Callable[[Message], None]


@dataclass(frozen=True)
class TurnOutcome:
    """A turn, settled (``turn_run``): the messages it stored and the context after it, as they stand
    once it is over; what became of the reply (``result``: cut by the cap, tool calls), whether the
    context changed besides, and whether a compression still runs."""

    user_message: Message
    assistant_message: Message
    result: ChatResult
    prompt_tokens: int
    prompt_exact: bool
    # The context once the reply and its markers are stored: what the page and the API show after the turn,
    # read at the session's ``context_version``.
    context: ContextReport
    context_version: int
    markers_applied: int
    # Something besides the reply changed the context during the turn (its goal markers, a goal
    # set in another tab, a compression, a restore): what the goals panel shows may have changed.
    context_changed_meanwhile: bool
    # The reply the model continued (TurnContinue), which the stored one starts with.
    continued_from: str = ""
    # A compression the turn made due, or found running, had not ended when the turn was settled.
    compression_running: bool = False

    @property
    def new_text(self) -> str:
        """What the model wrote in this turn."""
        return self.assistant_message.content[len(self.continued_from) :]

    @property
    def cut_by_cap(self) -> bool:
        return self.result.done_reason == "length"


def _call_text(call: ToolCall) -> str:
    """A tool call as counted when stored: its name and arguments, as the model writes them."""
    return json.dumps({"name": call.name, "arguments": call.arguments})


def turn_run(
    *,
    session_id: UUID,
    variant: TurnVariant,
    gateway: Gateway | None = None,
    on_delta: Hear | None = None,
    on_stored: OnStoredMessage | None = None,
    on_wait: Hear | None = None,
    tools: Sequence[dict[str, Any]] = (),
    max_tokens: int | None = None,
    stop: TurnStop | None = None,
    compression_wait_seconds: float = 0,
) -> TurnOutcome:
    """Run one turn as ``variant`` says, in the calling thread, and return it settled; ``on_stored``
    hears of the user's message once it is safe in the history, ``on_wait`` why the reply waits (for a
    compression, in its host's queue), ``on_delta`` receives the reply as it streams. ``tools``: the tool
    definitions the model may call (only for a model with the "tools" capability); the calls it makes are
    stored as tool messages awaiting their results, named by the ids the outcome's ``result.tool_calls``
    carry. ``max_tokens``: the client's own cap on the reply (a drop-in request's ``max_tokens`` or
    ``num_predict``, the REST message's), applied under the session's: the reply stops there with
    ``done_reason`` "length". ``stop``: stops the turn from another thread (the page's Stop, a client going
    away); the part of the reply that came is stored, marked as stopped. ``compression_wait_seconds``: how
    long the settled outcome may wait for a compression the turn made due (or found running) to end.

    Raises a ValidationError for a variant the session's history does not allow, or bad input (nothing
    stored), an LLMError when no reply can be had (the user's message stays stored), TurnStopped when
    ``stop`` stopped it.
    """
    driver = Driver(stop or TurnStop())
    try:
        session, before = session_and_last_event_id(session_id=session_id)
        outcome = _turn(
            session, variant, gateway or get_gateway(), on_delta, on_stored, on_wait, driver, tools, max_tokens
        )
        return _settled(outcome, before, compression_wait_seconds, driver.stop)
    except asyncio.CancelledError:
        raise TurnStopped from None
    finally:
        driver.close()


def _turn(  # the turn itself (``turn_run``), up to the reply's outcome
    session: Session, variant: TurnVariant, gateway: Gateway, on_delta: Hear | None,
    on_stored: OnStoredMessage | None, on_wait: Hear | None, driver: Driver, tools: Sequence[dict[str, Any]],
    max_tokens: int | None,
) -> TurnOutcome:  # fmt: skip
    # The reply a regeneration replaces or a continuation goes on from, read before either changes anything.
    latest = (
        session_latest_message(session=session)
        if isinstance(variant, TurnContinue | TurnRegenerate | TurnRetry)
        else None
    )
    if isinstance(variant, TurnRetry):
        # A reply its host cut off (issue 49, item 5) is answered again as a regeneration: a new version.
        if latest is not None and latest.role == Message.Role.ASSISTANT and latest.done_reason == REPLY_CUT:
            variant = TurnRegenerate()
        else:
            latest = None
    user_message = variant.message(session, gateway)
    if on_stored is not None:
        on_stored(user_message)
    driver.stop.check()
    continued = latest if isinstance(variant, TurnContinue) else None
    version_of_id = None
    if latest is not None and isinstance(variant, TurnRegenerate):
        version_of_id = latest.version_of_id or latest.pk
    elif latest is not None and (continued is not None or latest.version_of_id or latest.versions.exists()):
        # A continued reply is a version of the text it went on from, which the page then shows in its
        # place (with its switcher); a continued version stays among its siblings.
        version_of_id = latest.version_of_id or latest.pk
    return _reply(
        user_message.session, gateway, user_message, on_delta, on_wait, driver, continued, version_of_id, tuple(tools),
        max_tokens,
    )  # fmt: skip


async def _read(stream: ChatStream, parts: list[str], on_delta: Hear | None) -> None:
    """The reply's deltas into ``parts`` as they come, each handed to ``on_delta``: what came stays
    there when the stream is cancelled or fails."""
    async for delta in stream:
        parts.append(delta)
        if on_delta is not None:
            on_delta(delta)


def _reply(  # ``continued``: the reply a TurnContinue goes on from; ``version_of_id``: see message_create
    session: Session, gateway: Gateway, user_message: Message, on_delta: Hear | None, on_wait: Hear | None,
    driver: Driver, continued: Message | None = None, version_of_id: int | None = None,
    tools: tuple[dict[str, Any], ...] = (), requested_max_tokens: int | None = None,
) -> TurnOutcome:  # fmt: skip
    model_require_available(session=session, gateway=gateway)
    refuse_if_it_can_never_fit(session, user_message)
    # The context version the window is read at (or an older one, when something wrote in between).
    read_at = session.context_version
    before = _context_before_reply(session)
    messages, prompt = prompt_with_room(session, gateway, user_message, before.window, on_wait, driver)
    messages, prompt = prompt_with_recall(session, gateway, user_message, messages, prompt)
    driver.stop.check()
    # The cap follows the context size: at most 15% of num_ctx (255 tokens on 2K), never past num_ctx.
    max_tokens = min(
        reply_max_tokens(session.max_tokens, settings.OLLM_REPLY_MAX_TOKENS), session.max_tokens - prompt.tokens
    )
    if requested_max_tokens is not None:
        # The client's smaller cap (issue 49, item 2): its reply stops there, as it asked.
        max_tokens = min(max_tokens, requested_max_tokens)
    stream = gateway.send(
        ChatRequest(
            messages,
            model=session.model,
            num_ctx=session.max_tokens,
            max_tokens=max_tokens,
            sampling=reply_sampling(session),
            tools=tools,
        ),
        on_queued=queue_reporter(on_wait),
    )
    parts: list[str] = []
    stopped = False
    cut: ReplyCut | None = None
    try:
        # The reply is read on the turn's own loop; Stop cancels the wait for the next delta at once.
        driver.run(_read(stream, parts, on_delta))
    except asyncio.CancelledError:
        stopped = True
    except ReplyCut as exc:
        if not "".join(parts).strip():
            raise
        cut = exc  # its host failed after part of the reply reached the user: that part is kept
    finally:
        driver.run(stream.aclose(), stoppable=False)
    text = "".join(parts)
    counter = message_counter(gateway, session.model)
    if continued is not None and (parts or not stopped):
        messages_supersede(message=continued)
        text = continued.content + text
        session = Session.objects.get(pk=session.pk)  # its leaving moved the context version
    if stopped or cut is not None:
        # The user saw this much of the reply and may refer to it: it is kept, marked as stopped, or as
        # cut when its host failed (issue 49, item 5; Retry answers the question again, as a new version).
        if text.strip():
            message_create(
                session=session,
                role=Message.Role.ASSISTANT,
                content=text,
                token_count=count_text(counter, text),
                done_reason="cancelled" if stopped else REPLY_CUT,
                version_of_id=version_of_id,
            )
        if cut is not None:
            raise cut
        raise TurnStopped
    result = stream.result
    if result is None:
        raise LLMError("the reply ended without its final counts")
    if result.sent_prompt_tokens is not None:
        session_prompt_truncated(
            session=session, sent_tokens=result.sent_prompt_tokens, reported_tokens=result.prompt_tokens
        )
    count = count_text(counter, text)
    # The calls are named here when the backend did not (Ollama does not): the client answers each by its id.
    calls = tuple(dataclasses.replace(c, id=c.id or f"call_{uuid.uuid4().hex[:24]}") for c in result.tool_calls)
    result = dataclasses.replace(result, tool_calls=calls)
    call_counts = [count_text(counter, _call_text(call)) for call in calls]
    # A stopped reply's markers were never applied; a finished one's were when it was stored.
    applied = continued.content if continued is not None and continued.done_reason not in UNFINISHED else ""
    after = _after_reply(
        session, text, count, result.done_reason, applied, version_of_id, list(zip(calls, call_counts, strict=True)),
        before=before.report, read_at=read_at,
    )  # fmt: skip
    return TurnOutcome(
        user_message,
        after.message,
        result,
        prompt.tokens,
        prompt.exact,
        after.context,
        after.context_version,
        after.markers,
        # Every write to the context raises the session's context version; the reply is one, or one a call.
        context_changed_meanwhile=after.context_version > session.context_version + after.stored,
        continued_from=continued.content if continued is not None else "",
    )


def _settled(outcome: TurnOutcome, after_event_id: int | None, wait_seconds: float, stop: TurnStop) -> TurnOutcome:
    """The turn as it stands once it is over. A compression the turn made due (one may not have taken its
    lease yet: none has ended since event ``after_event_id``) or found running is waited for
    ``wait_seconds`` at most. When nothing but the reply has written to the context since the message was
    stored, the turn's report and messages stand; else a compression or a restore, during the turn or
    since, may have taken either message out of the context: both, and the context, are read again."""
    session = Session.objects.get(pk=outcome.user_message.session_id)
    ended = True
    if lease_held_on(session=session) or outcome.context.budget.compression_due:
        # A compression runs, or may be about to: waited for as asked, then the session read again.
        ended = compression_wait_blocking(
            session_id=session.pk,
            timeout=wait_seconds,
            after_event_id=after_event_id,
            budget=outcome.context.budget,
            interrupted=lambda: stop.stopped,
        )
        session = Session.objects.get(pk=session.pk)
    if not outcome.context_changed_meanwhile and session.context_version == outcome.context_version:
        return dataclasses.replace(outcome, compression_running=not ended)
    stored = Message.objects.in_bulk([outcome.user_message.pk, outcome.assistant_message.pk])
    user_message, assistant_message = stored[outcome.user_message.pk], stored[outcome.assistant_message.pk]
    user_message.session = assistant_message.session = session
    return dataclasses.replace(
        outcome,
        user_message=user_message,
        assistant_message=assistant_message,
        context=session_context(session=session),
        context_version=session.context_version,
        context_changed_meanwhile=True,
        compression_running=not ended,
    )


def _context_before_reply(session: Session) -> ContextRead:
    """The window the reply is asked from and the context it makes, and the budget check of it: the
    user's message may have made a compression due (which runs in the background)."""
    read = session_context_read(session=session)
    compression_maybe_schedule(session=session, budget=read.report.budget)
    return read


@dataclass(frozen=True)
class _AfterReply:
    message: Message
    context: ContextReport
    markers: int
    context_version: int
    # Messages the reply was stored as: its text and its tool calls.
    stored: int = 1


def _after_reply(
    session: Session,
    text: str,
    count: TokenCount,
    done_reason: str,
    applied: str,
    version_of_id: int | None,
    calls: Sequence[tuple[ToolCall, TokenCount]],
    *,
    before: ContextReport,
    read_at: int,
) -> _AfterReply:
    """Store the reply (in its own transaction: it is kept whatever follows), apply its goal
    markers, then read the context: it says whether a compression is due and is what the
    page's meter and the API show after the turn: ``before``, the context the reply was asked from (read
    at context version ``read_at``), with the reply in it when nothing else was written to the context
    since, else read again. A reply's tool calls are tool messages after its
    text, each awaiting its result (``message_tool_results``); a reply that is only calls has no
    assistant message of its own (as ``history_entries`` stores a client's), its first call stands for it."""
    stored = []
    if text.strip() or not calls:
        stored.append(
            message_create(
                session=session,
                role=Message.Role.ASSISTANT,
                content=text,
                token_count=count,
                done_reason=done_reason,
                version_of_id=version_of_id,
            )
        )
    stored += [
        message_create(
            session=session,
            role=Message.Role.TOOL,
            content="",
            token_count=call_count,
            done_reason=done_reason,
            tool_call_id=call.id,
            tool_name=call.name,
            tool_args=call.arguments,
        )
        for call, call_count in calls
    ]
    message = stored[0]
    try:
        markers = goal_apply_markers(session=session, text=text, applied_before=applied)
    except Exception:
        # The reply is stored and answered the user; a marker it could not apply must not
        # turn the turn into an error whose Retry would find nothing left to answer.
        logger.exception("goal markers of a reply in session %s could not be applied", session.pk)
        markers = 0
    written = stored[-1].session  # the session row as the last store locked and wrote it
    if not markers and written.context_version == read_at + len(stored):
        session = written
        report = context_report_with(before, session=session, added=stored)
    else:
        session = Session.objects.get(pk=session.pk)
        report = session_context(session=session)
    compression_maybe_schedule(session=session, budget=report.budget)
    if session.title_pending and message.role == Message.Role.ASSISTANT:
        session_title_schedule(session_id=session.pk)  # after the reply, in the background
    return _AfterReply(message, report, markers, session.context_version, len(stored))
