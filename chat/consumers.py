"""The chat websocket: one per open chat page.

Frames from the page are JSON (htmx's ws extension sends the form's values);
frames to the page are HTML fragments that htmx swaps out of band by id. A
reply streams in its own task so Stop and the session's live events are
handled while it runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from importlib import import_module
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from channels.auth import get_user
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import Http404
from django.template.loader import render_to_string

from chat.fragments import chat_fragments
from chat.models import MAX_MESSAGE_CHARS
from chat.selectors import session_for_owner
from chat.turn import turn_edit, turn_regenerate, turn_retry, turn_run
from contextmgr.llm.types import ContextOverflow, LLMError
from contextmgr.services.events import consumer_loop_register, session_group

logger = logging.getLogger(__name__)

# Room for the form's other fields and htmx's HEADERS around the longest message.
MAX_FRAME_CHARS = MAX_MESSAGE_CHARS + 10_000
# send: a new message; edit: a new version of ``message_id``; retry: answer the unanswered last
# message; regenerate: answer the last message again, in place of the latest reply.
ACTIONS = ("send", "stop", "retry", "regenerate", "edit")


class FrameError(ValueError):
    pass


@dataclass(frozen=True)
class Frame:
    action: str
    message: str = ""
    message_id: int | None = None


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
    if action in ("send", "edit") and not message.strip():
        raise FrameError("The message is empty.")
    message_id = None
    if action == "edit":
        raw_id = data.get("message_id")
        if not (isinstance(raw_id, int | str) and str(raw_id).isdigit()):
            raise FrameError("An edit names the message it replaces.")
        message_id = int(raw_id)
    return Frame(action, message, message_id)


class ChatConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels ships no type hints
    session_id: UUID
    turn: asyncio.Task[None] | None = None
    turn_number = 0
    # Set when the history changed while a reply streamed (and was not re-sent then):
    # the end of the turn re-sends it whole, else only the stored reply.
    history_stale = False

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
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.turn is not None:
            self.turn.cancel()
        if hasattr(self, "session_id"):
            await self.channel_layer.group_discard(session_group(self.session_id), self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not await self.still_logged_in():
            await self.close(code=4401)
            return
        try:
            frame = parse_frame(text_data, self.session_id)
        except FrameError as exc:
            await self.send_error(str(exc))
            return
        if frame.action == "stop":
            if self.turn is not None:
                self.turn.cancel()
            return
        if self.turn is not None and not self.turn.done():
            await self.send_error("A reply is still coming: wait for it or press Stop.")
            return
        self.turn_number += 1
        self.turn = asyncio.create_task(self.run_turn(self.turn_number, frame))

    async def still_logged_in(self) -> bool:
        """Whether the socket's Django session still logs in the user it was opened by.

        Read afresh from the session store (the scope's copy is the one loaded at connect): a
        logout (the session flushed), a password change elsewhere or a deactivated user ends
        the socket at its next frame, as it ends the session's next page request.
        """
        key = getattr(self.scope.get("session"), "session_key", None)
        if key is None:
            return False
        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
        user = await get_user({"session": store})
        return bool(user.is_authenticated and user.pk == self.scope["user"].pk)

    async def run_turn(self, number: int, request: Frame) -> None:
        """Stream one reply into the page, as ``request`` asks."""
        reply_id = f"reply-{number}"
        started = False

        def frame(part: str, text: str = "") -> str:
            return render_to_string("chat/ws/_reply_stream.html", {"part": part, "reply_id": reply_id, "text": text})

        async def on_delta(delta: str) -> None:
            nonlocal started
            if not started:
                started = True
                await self.send_to_page(frame("start"))
            await self.send_to_page(frame("delta", delta))

        async def on_wait(why: str) -> None:
            await self.send_to_page(frame("status", why))

        async def on_stored(user_message: Any) -> None:
            # A new message is appended; a retry, an edit or a regeneration changed what the page
            # shows (messages left the context, a Retry is answered): the history comes whole.
            await self.send_to_page(
                await sync_to_async(chat_fragments)(
                    "turn_start",
                    self.session_id,
                    session=user_message.session,
                    user_message=user_message if request.action == "send" else None,
                    with_history=request.action != "send",
                    clear_composer=request.action in ("send", "edit"),
                    reply_id=reply_id,
                )
            )

        callbacks: dict[str, Any] = {"on_delta": on_delta, "on_stored": on_stored, "on_wait": on_wait}
        try:
            if request.action == "retry":
                outcome = await turn_retry(session_id=self.session_id, **callbacks)
            elif request.action == "regenerate":
                outcome = await turn_regenerate(session_id=self.session_id, **callbacks)
            elif request.action == "edit":
                assert request.message_id is not None  # parse_frame requires it
                outcome = await turn_edit(
                    session_id=self.session_id, message_id=request.message_id, content=request.message, **callbacks
                )
            else:
                outcome = await turn_run(session_id=self.session_id, content=request.message, **callbacks)
        except asyncio.CancelledError:
            self.history_stale = False  # the frame below re-sends it
            await self.send_to_page(
                await sync_to_async(chat_fragments)("turn_stopped", self.session_id, reply_id=reply_id)
            )
            raise
        except ValidationError as exc:
            await self.send_error(" ".join(exc.messages), reply_id=reply_id)
        except ContextOverflow as exc:
            # Sending the same message again cannot help: it says what would, and the text goes back
            # into the composer to be shortened.
            await self.send_error(str(exc), reply_id=reply_id, composer_text=request.message)
        except LLMError as exc:
            await self.send_error(str(exc), reply_id=reply_id, retry=True)
        except Exception:
            logger.exception("turn failed in session %s", self.session_id)
            await self.send_error(
                "Something went wrong on the server; your message is saved.", reply_id=reply_id, retry=True
            )
        else:
            try:
                await self.channel_layer.group_send(
                    session_group(self.session_id), {"type": "chat.changed", "origin": self.channel_name}
                )
            except Exception:  # the other pages miss one live update; the turn is stored
                logger.exception("could not tell the other pages of session %s", self.session_id)
            # Last: once the page has this frame it may send the next message, and the turn must be over.
            with_history, self.history_stale = self.history_stale, False
            await self.send_to_page(
                await sync_to_async(chat_fragments)(
                    "turn_done",
                    self.session_id,
                    reply_id=reply_id,
                    assistant_message=outcome.assistant_message,
                    with_history=with_history,
                    goals_changed=outcome.context_changed_meanwhile,
                )
            )

    async def send_to_page(self, text: str) -> None:
        """Send a frame of the turn, if the page is still there.

        The socket can go while a reply streams without the turn being cancelled (the consumer
        dies with its channel layer, e.g. when Redis restarts): the turn then finishes and is
        stored, and the page shows it once it has reconnected.
        """
        try:
            await self.send(text_data=text)
        except Exception:  # daphne refuses sends on a closed socket
            logger.info("session %s: a frame for a closed socket was dropped", self.session_id)

    async def send_error(
        self, text: str, *, reply_id: str | None = None, retry: bool = False, composer_text: str = ""
    ) -> None:
        """The error line, in place of the reply if one was started; ``composer_text`` goes back into
        the composer (a message refused for its length, to be shortened)."""
        await self.send_to_page(
            render_to_string(
                "chat/ws/_error.html",
                {
                    "text": text,
                    "reply_id": reply_id,
                    "retry": retry,
                    "composer_text": composer_text,
                    # The page may send again: the turn this error ends, or none was running.
                    "idle": reply_id is not None or not self.streaming,
                },
            )
        )

    async def chat_changed(self, message: dict[str, Any]) -> None:
        """Another page of this session finished a turn: show the new history here too."""
        if message.get("origin") == self.channel_name:
            return
        if self.streaming:
            self.history_stale = True
        else:
            await self.send(text_data=await sync_to_async(chat_fragments)("history", self.session_id))

    async def context_event(self, message: dict[str, Any]) -> None:
        event = message["event"]
        self.history_stale = self.history_stale or self.streaming
        html = await sync_to_async(chat_fragments)(
            "event", self.session_id, event=event, with_history=not self.streaming
        )
        await self.send(text_data=html)

    async def context_progress(self, message: dict[str, Any]) -> None:
        await self.send(text_data=render_to_string("chat/_progress.html", {"text": message["text"], "oob": True}))

    @property
    def streaming(self) -> bool:
        return self.turn is not None and not self.turn.done()
