"""The chat websocket: one per open chat page.

Frames from the page are JSON (htmx's ws extension sends the form's values);
frames to the page are HTML fragments that htmx swaps out of band by id. A
reply belongs to the session, not to the socket (``chat.web.live``): it streams
to every open page of the session, a page opened meanwhile joins it, and
closing the page that asked for it does not stop it; Stop from any page does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.auth import get_user
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http import Http404
from django.template.loader import render_to_string

from chat.models import MAX_MESSAGE_CHARS
from chat.selectors.sessions import session_for_owner
from chat.services.attachments import Attachment
from chat.services.turn import TurnContinue, TurnEdit, TurnRegenerate, TurnRetry, TurnSend, TurnVariant
from chat.web.channel_events import consumer_loop_register, session_group, user_group
from chat.web.fragments import chat_fragments
from chat.web.live import STILL_COMING, reply_in_flight, reply_join, reply_start, reply_stop

logger = logging.getLogger(__name__)

# Room for the form's other fields and htmx's HEADERS around the longest message.
MAX_FRAME_CHARS = MAX_MESSAGE_CHARS + 10_000
# send: a new message; edit: a new version of ``message_id``; retry: answer the unanswered last
# message; regenerate: answer the last message again, in place of the latest reply; continue: go on
# with the latest reply where it was cut (the drop-in endpoints' continuation, TurnContinue).
ACTIONS = ("send", "stop", "retry", "regenerate", "edit", "continue")
# Channels' dispatch closes the database connections of the thread the sockets' reads share before every
# handler: a thread hop each time, and a new connection for the next read. Not before these: the relays
# of a frame rendered elsewhere (each of a reply's deltas, a compression's progress) read no database, and
# a page's frame is read only after its login is checked (``get_user``, which cleans up around its read).
NO_CLEANUP = frozenset({"reply.frame", "context.progress", "websocket.receive"})


class FrameError(ValueError):
    pass


@dataclass(frozen=True)
class Frame:
    action: str
    message: str = ""
    # The turn the frame asks for; None for Stop.
    variant: TurnVariant | None = None


def parse_frame(text: str | None, session_id: UUID) -> Frame:
    """What a page's frame asks, or FrameError with what is wrong."""
    if text is None:
        raise FrameError("Frames must be text.")
    if len(text) > MAX_FRAME_CHARS:
        raise FrameError(f"The message is too long: the limit is {MAX_MESSAGE_CHARS:,} characters.")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise FrameError("Frames must be JSON objects.") from None
    if not isinstance(data, dict):
        raise FrameError("Frames must be JSON objects.")
    action = data.get("action", "send")
    if action not in ACTIONS:
        raise FrameError(f"Unknown action {action!r}: use one of {', '.join(ACTIONS)}.")
    if "session" in data and str(data["session"]) != str(session_id):
        raise FrameError("This socket belongs to another session.")
    message = data.get("message", "")
    if not isinstance(message, str):
        raise FrameError("The message must be text.")
    attachment = _attachment(data) if action == "send" else None
    if action in ("send", "edit") and not message.strip() and attachment is None:
        raise FrameError("The message is empty.")
    variant: TurnVariant | None
    match action:
        case "send":
            variant = TurnSend(message, attachment)
        case "retry":
            variant = TurnRetry()
        case "regenerate":
            variant = TurnRegenerate()
        case "continue":
            variant = TurnContinue()
        case "edit":
            raw_id = data.get("message_id")
            if not (isinstance(raw_id, int | str) and str(raw_id).isdigit()):
                raise FrameError("An edit names the message it replaces.")
            variant = TurnEdit(int(raw_id), message)
        case _:
            variant = None
    return Frame(action, message, variant)


def _attachment(data: dict[str, Any]) -> Attachment | None:
    """The text file the composer attached (its name and text, read by the page), if any; the turn checks it."""
    name, text = data.get("attachment_name", ""), data.get("attachment_text", "")
    if not (isinstance(name, str) and isinstance(text, str)):
        raise FrameError("An attached file is sent as its name and its text.")
    return Attachment(name, text) if name else None


class ChatConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels ships no type hints
    session_id: UUID
    turn_number = 0
    # Whether a reply of the session streams, as the frames of the session's group said: a reply in
    # another process is known by them only.
    reply_live = False
    # Set when the history changed while a reply streamed (and was not re-sent then): the end of
    # the turn re-sends it whole, unless its last frame brings it.
    history_stale = False
    # Set when the socket's login ended: nothing more is sent to it.
    logged_out = False

    async def dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") in NO_CLEANUP:
            await getattr(self, get_handler_name(message))(message)
        else:
            await super().dispatch(message)

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        try:
            session = await sync_to_async(session_for_owner)(
                user=user, session_id=self.scope["url_route"]["kwargs"]["session_id"]
            )
        except Http404:
            await self.close(code=4404)
            return
        self.session_id = session.pk
        consumer_loop_register(asyncio.get_running_loop())
        await self.channel_layer.group_add(session_group(self.session_id), self.channel_name)
        # A logout, a password change or a deactivation reaches the socket through its user's group.
        await self.channel_layer.group_add(user_group(user.pk), self.channel_name)
        await self.accept()
        await self.join_reply()

    async def join_reply(self) -> None:
        """Bring the page in step with the session's reply: a reply in flight sends what it has
        so far (its next frames reach this socket through the session's group, joined before).
        A page rendered with a reply in progress (``?live=1``) that has ended since, in this
        process, gets its history again and is told that nothing streams."""
        rendered_live = parse_qs(self.scope.get("query_string", b"").decode()).get("live") == ["1"]
        if rendered_live and reply_in_flight(self.session_id) is None:
            await self.send(text_data=await sync_to_async(chat_fragments)("history", self.session_id))
            await self.send(text_data=render_to_string("chat/ws/_idle.html"))
        # Also when none streams here: one may in another process, which answers.
        try:
            await reply_join(session_id=self.session_id, channel=self.channel_name)
        except Exception as exc:  # the layer failing (Redis coming back) must not close the page it accepted
            logger.warning(
                "session %s: a page could not ask for the reply so far (%r); it shows the reply's next frames",
                self.session_id,
                exc,
            )

    async def disconnect(self, code: int) -> None:
        # The reply, if one streams, goes on: it belongs to the session, and reaches its other pages.
        await self.leave_groups()

    async def leave_groups(self) -> None:
        if hasattr(self, "session_id"):
            await self.channel_layer.group_discard(session_group(self.session_id), self.channel_name)
            await self.channel_layer.group_discard(user_group(self.scope["user"].pk), self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not await self.still_logged_in():
            await self.end_login()
            return
        try:
            frame = parse_frame(text_data, self.session_id)
        except FrameError as exc:
            await self.send_error(str(exc))
            return
        if frame.action == "stop":
            await reply_stop(session_id=self.session_id)
            return
        assert frame.variant is not None  # parse_frame sets it for every action but stop
        self.turn_number += 1
        if self.reply_live or not reply_start(
            session_id=self.session_id,
            variant=frame.variant,
            action=frame.action,
            origin=self.channel_name,
            reply_id=f"reply-{self.turn_number}",
            composer_text=frame.message,
        ):
            await self.send_error(STILL_COMING)

    async def login_ended(self, message: dict[str, Any]) -> None:
        """A login of the socket's user ended (``chat.services.events.user_sockets_recheck``, delivered by
        ``chat.web.channel_events``): the logout of this socket's own Django session closes it; otherwise it
        closes if its session no longer logs the user in."""
        own = getattr(self.scope.get("session"), "session_key", None)
        if (own is not None and message.get("session_key") == own) or not await self.still_logged_in():
            await self.end_login()

    async def end_login(self) -> None:
        """Close with 4401 and send nothing more: the session's reply and live updates no longer reach
        the socket. A reply that streams goes on (it belongs to the session, whose other pages may be
        logged in still) and is stored; Stop is for whoever is still logged in."""
        self.logged_out = True
        await self.leave_groups()
        await self.close(code=4401)

    async def send(self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False) -> None:
        if not self.logged_out:
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    async def still_logged_in(self) -> bool:
        """Whether the socket's Django session still logs in the user it was opened by.

        Read afresh from the session store (the scope's copy is the one loaded at connect): a
        logout (the session flushed), a password change elsewhere or a deactivated user ends
        the socket, as it ends the session's next page request.
        """
        key = getattr(self.scope.get("session"), "session_key", None)
        if key is None:
            return False
        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
        user = await get_user({"session": store})
        return bool(user.is_authenticated and user.pk == self.scope["user"].pk)

    async def reply_frame(self, message: dict[str, Any]) -> None:
        """A frame of the session's reply (``chat.web.live``), for every page of the session; ``own`` only
        for the page that asked for the turn."""
        if "streaming" in message:
            self.reply_live = bool(message["streaming"])
        await self.send_to_page(message["html"])
        if message.get("own") and message.get("origin") == self.channel_name:
            await self.send_to_page(message["own"])
        if message.get("done"):
            stale, self.history_stale = self.history_stale, False
            if stale and not message.get("with_history"):
                # A relay's one read: its connections cleaned up around it, as dispatch does for other events.
                html = await database_sync_to_async(chat_fragments)("history", self.session_id)
                await self.send_to_page(html)

    async def send_to_page(self, text: str) -> None:
        """Send a frame, if the page is still there: the socket can go before its consumer hears
        of it, and the reply goes on without it."""
        try:
            await self.send(text_data=text)
        except Exception:  # daphne refuses sends on a closed socket
            logger.info("session %s: a frame for a closed socket was dropped", self.session_id)

    async def send_error(self, text: str) -> None:
        """The error line for a frame the page sent that was refused; the page may send again when no
        reply streams."""
        await self.send_to_page(
            render_to_string(
                "chat/ws/_error.html",
                {"text": text, "reply_id": None, "retry": False, "composer_text": "", "idle": not self.streaming},
            )
        )

    async def context_event(self, message: dict[str, Any]) -> None:
        event = message["event"]
        self.history_stale = self.history_stale or self.streaming
        html = await sync_to_async(chat_fragments)(
            "event", self.session_id, event=event, with_history=not self.streaming
        )
        await self.send(text_data=html)

    async def chat_history(self, message: dict[str, Any]) -> None:
        """Messages of the session were written elsewhere (the API, an Ollama or OpenAI client): the
        history anew, or at the end of the reply that streams (not to disturb it)."""
        if self.streaming:
            self.history_stale = True
        elif message.get("after_position") is not None:
            html = await sync_to_async(chat_fragments)(
                "appended", self.session_id, after_position=int(message["after_position"])
            )
            await self.send(text_data=html)
        else:
            await self.send(text_data=await sync_to_async(chat_fragments)("history", self.session_id))

    async def context_goals(self, message: dict[str, Any]) -> None:
        """The session's goals changed (on another page, through the API, or by a reply's markers):
        the goals panel and the meter anew. Not while a reply streams: its last frame brings them."""
        if not self.streaming:
            await self.send(text_data=await sync_to_async(chat_fragments)("goals", self.session_id))

    async def context_progress(self, message: dict[str, Any]) -> None:
        await self.send(text_data=render_to_string("chat/_progress.html", {"text": message["text"], "oob": True}))

    @property
    def streaming(self) -> bool:
        return self.reply_live or reply_in_flight(self.session_id) is not None
