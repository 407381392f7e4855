"""A session's reply in flight: it belongs to the session, not to the page that asked for it.

A turn runs as a task of the process's event loop, so closing or reloading the page that started
it does not stop it. Its frames go to the session's group (every open page of the session, in any
process, through the channel layer); it listens on a channel of its own, in the group
``reply_group(session_id)``, for "stop" (from any page of the session) and "join" (a page that
opens during the reply), which it answers with the reply so far. Only Stop or the model failing
ends it. The registry of this process's replies lets the chat page render one in progress and
refuses a second turn of the session while one runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string

from chat.models import Message
from chat.selectors.sessions import ModelUnavailable
from chat.services.turn import TurnOutcome, TurnVariant, turn_take
from chat.web.channel_events import session_group
from chat.web.fragments import chat_fragments
from chat.web.rendering import render_markdown
from engine.llm.types import ContextOverflow, LLMError, ReplyCut

logger = logging.getLogger(__name__)
STILL_COMING = "A reply is still coming: wait for it or press Stop."
# What a page's turn asks for, as ``chat.web.consumers.parse_frame`` read it: send, retry, regenerate, edit, continue.
Action = str


def reply_group(session_id: UUID) -> str:
    """The channel-layer group the session's reply in flight listens on (at most one member)."""
    return f"session-{session_id}-reply"


@dataclass
class LiveReply:
    """One session's reply while it streams; read by the chat page and the joining sockets."""

    session_id: UUID
    # The element every page of the session streams the reply into.
    reply_id: str
    parts: list[str] = field(default_factory=list)
    # Why the reply has not started yet ("waiting for the compression…"), once it is said.
    status: str = ""
    # The user's message is stored: the pages show it, and the reply to it under it.
    stored: bool = False
    # Serializes a delta's broadcast with a catch-up's reading of ``parts``, so a joining page
    # never receives a delta older than the text its catch-up brought.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    # Stop was asked for (and the task cancelled) already.
    stopping: bool = False

    @property
    def text(self) -> str:
        return "".join(self.parts)


# This process's replies in flight, by session. Read from the page views' threads too: entries are
# only added and removed whole, and a reply's text is read as one join of its parts.
_replies: dict[UUID, LiveReply] = {}


def reply_in_flight(session_id: UUID) -> LiveReply | None:
    """The session's reply streaming in this process, if one is."""
    return _replies.get(session_id)


def reply_start(
    *, session_id: UUID, variant: TurnVariant, action: Action, origin: str, reply_id: str, composer_text: str = ""
) -> bool:
    """Start the session's turn as ``variant`` says, for the page on channel ``origin`` (``composer_text``:
    what goes back into its composer if the message cannot fit); False (and nothing started) when a
    reply of the session already streams in this process.

    Precondition: called on the process's event loop by a consumer that checked the page's owner.
    """
    if session_id in _replies:
        return False
    live = LiveReply(session_id=session_id, reply_id=reply_id)
    _replies[session_id] = live
    live.task = asyncio.create_task(_run(live, variant, action, origin, composer_text))
    return True


async def reply_stop(*, session_id: UUID) -> None:
    """Ask the session's reply in flight, in whatever process, to stop (nothing when none streams)."""
    await _layer().group_send(reply_group(session_id), {"type": "reply.stop"})


async def reply_join(*, session_id: UUID, channel: str) -> None:
    """Ask the session's reply in flight, in whatever process, to send the reply so far to ``channel``."""
    await _layer().group_send(reply_group(session_id), {"type": "reply.join", "channel": channel})


def _layer() -> BaseChannelLayer:
    layer = get_channel_layer()
    assert layer is not None  # settings.CHANNEL_LAYERS always names one
    return layer


def _stream_frame(live: LiveReply, part: str, text: str = "") -> str:
    """A frame of the streamed reply; a delta's carries the reply so far rendered as the stored one will be
    (markdown, sanitized: chat.web.rendering), so it reads as formatted text while it grows (issue 47, item 7)."""
    rendered = render_markdown(live.text) if part == "delta" else ""
    return render_to_string(
        "chat/ws/_reply_stream.html", {"part": part, "reply_id": live.reply_id, "text": text, "rendered": rendered}
    )


async def _broadcast(live: LiveReply, html: str, *, origin: str = "", own: str = "", **state: Any) -> None:
    """``html`` to every page of the session, ``own`` only to the page on channel ``origin`` after it;
    ``state``: ``streaming`` (whether a reply is now in flight), ``done`` (the turn's last frame)."""
    message = {"type": "reply.frame", "html": html, "origin": origin, "own": own, **state}
    try:
        await _layer().group_send(session_group(live.session_id), message)
    except Exception:  # the pages miss a frame; the reply is stored all the same, and a reload shows it
        logger.exception("could not send a frame of the reply in session %s", live.session_id)


async def _to_origin(origin: str, html: str) -> None:
    try:
        await _layer().send(
            origin, {"type": "reply.frame", "html": html, "origin": origin, "own": "", "streaming": False, "done": True}
        )
    except Exception:
        logger.exception("could not answer the page on %s", origin)


async def _catch_up(live: LiveReply, channel: str) -> None:
    """The reply so far, whole, for a page that opened while it streams."""
    async with live.lock:
        html = await sync_to_async(chat_fragments)(
            "turn_join",
            live.session_id,
            stored=live.stored,
            reply_id=live.reply_id,
            reply_text=live.text,
            reply_status=live.status,
        )
        await _layer().send(channel, {"type": "reply.frame", "html": html, "origin": "", "own": "", "streaming": True})


async def _listen(live: LiveReply, channel: str) -> None:
    """Stop and join requests, until the turn ends (which cancels this)."""
    layer = _layer()
    while True:
        message = await layer.receive(channel)
        if message.get("type") == "reply.stop" and live.task is not None and not live.stopping:
            # Once: a second Stop must not cut short the storing of what came so far.
            live.stopping = True
            live.task.cancel()
        elif message.get("type") == "reply.join" and isinstance(message.get("channel"), str):
            try:
                await _catch_up(live, message["channel"])
            except Exception:  # that page misses the reply so far; the next frames still reach it
                logger.exception("could not catch a page up on the reply in session %s", live.session_id)


async def _run(live: LiveReply, variant: TurnVariant, action: Action, origin: str, composer_text: str) -> None:
    layer = _layer()
    group = reply_group(live.session_id)
    channel = ""
    listener: asyncio.Task[None] | None = None
    try:
        try:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            listener = asyncio.create_task(_listen(live, channel))
        except Exception as exc:
            # The channel layer cannot be reached (Redis restarting): the turn goes on all the same, and
            # stores the user's message first; only Stop and the catch-up of a page opening meanwhile miss it.
            logger.warning(
                "session %s: the channel layer could not be reached (%r); the reply goes on without Stop "
                "or catch-up, and its frames reach the pages only once the layer answers again",
                live.session_id,
                exc,
            )
        end = await _turn(live, variant, action, origin, composer_text)
    finally:
        # Before the last frame: a page that asks to join from now on is in the session's group
        # already and gets that frame, never a catch-up of a reply that has ended. The turn leaves
        # the registry first, whatever the layer does: else every later message of the session would
        # be refused as "still coming" (a Redis restart made group_discard fail here, issue 49, item 0).
        if _replies.get(live.session_id) is live:
            del _replies[live.session_id]
        if listener is not None:
            listener.cancel()
        if channel:
            try:
                await layer.group_discard(group, channel)
            except Exception as exc:  # the group dies with its expiry, or with the Redis that lost it
                logger.warning("session %s: the reply's channel left no group (%r)", live.session_id, exc)
    # Last: once a page has this frame it may send the next message, and the turn must be over.
    if end.everyone:
        await _broadcast(
            live, end.html, origin=origin, own=end.own, streaming=False, done=True, with_history=end.with_history
        )
    else:
        await _to_origin(origin, end.html + end.own)


@dataclass(frozen=True)
class _End:
    """A turn's last frame: for every page (``everyone``) or only the one that asked; ``own`` follows
    ``html`` on that one."""

    html: str
    everyone: bool = True
    own: str = ""
    # The frame brings the whole history.
    with_history: bool = False


async def _turn(live: LiveReply, variant: TurnVariant, action: Action, origin: str, composer_text: str) -> _End:
    """Stream one reply into every page of the session; its last frame."""
    started = False

    async def on_delta(delta: str) -> None:
        nonlocal started
        async with live.lock:
            if not started:
                started = True
                await _broadcast(live, _stream_frame(live, "start"))
            live.parts.append(delta)
            await _broadcast(live, _stream_frame(live, "delta", delta))

    async def on_wait(why: str) -> None:
        live.status = why
        await _broadcast(live, _stream_frame(live, "status", why))

    def on_stored(user_message: Message) -> Coroutine[Any, Any, None]:
        # Called in the turn's thread (``turn_listener``): the frame is rendered there, through the turn's
        # database connection, and the coroutine that sends it runs on the loop. A new message is
        # appended; a retry, an edit or a regeneration changed what the page shows (messages left the
        # context, a Retry is answered): the history comes whole.
        html = chat_fragments(
            "turn_start",
            live.session_id,
            session=user_message.session,
            user_message=user_message if action == "send" else None,
            with_history=action != "send",
            reply_id=live.reply_id,
        )
        own = _composer("") if action in ("send", "edit") else ""

        async def send() -> None:
            async with live.lock:
                live.stored = True
                await _broadcast(live, html, origin=origin, own=own, streaming=True)

        return send()

    def failed(text: str, *, retry: bool = False, back: str = "") -> _End:
        """The error line in place of the reply: on every page once the message is stored (they show
        it), else only on the page that asked; ``back`` goes into that page's composer."""
        html = render_to_string(
            "chat/ws/_error.html",
            {"text": text, "reply_id": live.reply_id, "retry": retry, "composer_text": "", "idle": True},
        )
        return _End(html, everyone=live.stored, own=_composer(back) if back else "")

    done: list[str] = []

    def render_done(outcome: TurnOutcome) -> None:
        # The history comes whole when something besides the reply changed the context meanwhile (a
        # compression, a goal, a restore, the reply's own markers); the goals panel then too.
        changed = outcome.context_changed_meanwhile
        done.append(
            chat_fragments(
                "turn_done",
                live.session_id,
                session=outcome.assistant_message.session,
                reply_id=live.reply_id,
                assistant_message=outcome.assistant_message,
                with_history=changed,
                goals_changed=changed,
                # The turn read the context once its reply was stored; when nothing else changed it
                # meanwhile, the meter shows that reading.
                report=None if changed else outcome.context,
            )
        )

    try:
        outcome = await turn_take(
            session_id=live.session_id,
            variant=variant,
            on_delta=on_delta,
            on_stored=on_stored,
            on_wait=on_wait,
            on_settled=render_done,
        )
    except asyncio.CancelledError:
        # Stopped: what came so far is stored (turn_take), and every page shows the history again.
        html = await sync_to_async(chat_fragments)("turn_stopped", live.session_id, reply_id=live.reply_id)
        return _End(html, with_history=True)
    except ValidationError as exc:
        return failed(" ".join(exc.messages))
    except ContextOverflow as exc:
        # Sending the same message again cannot help: it says what would, and the text goes back
        # into the composer to be shortened.
        return failed(str(exc), back=composer_text)
    except ModelUnavailable as exc:
        logger.warning("session %s: %s", live.session_id, exc)  # the operator's details, for the operator
        return failed(exc.page_message, retry=True)
    except LLMError as exc:
        # Every page of the session shows it: no host's URL (the log and /api/hosts name the hosts).
        if exc.operator_detail:
            logger.warning("session %s: %s (%s)", live.session_id, exc, exc.operator_detail)
        error = failed(exc.shown_to(staff=False), retry=True)
        if not isinstance(exc, ReplyCut):
            return error
        # The part of the reply that came is stored, marked as cut off: every page shows the history again,
        # that part with its badge, under the error and its Retry.
        html = await sync_to_async(chat_fragments)("turn_stopped", live.session_id, reply_id=live.reply_id)
        return _End(html + error.html, with_history=True)
    except Exception:
        logger.exception("turn failed in session %s", live.session_id)
        return failed("Something went wrong on the server; your message is saved.", retry=True)
    return _End(done[0], with_history=outcome.context_changed_meanwhile)


def _composer(text: str) -> str:
    return render_to_string("chat/_composer_text.html", {"oob": True, "composer_text": text})
