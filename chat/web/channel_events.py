"""The domain's events (``chat.services.events``) to the chat pages, through the channel layer: the one
module that names the groups and the message types, which the chat socket (``chat.web.consumers``) joins
and handles (a message of type ``context.event`` reaches its ``context_event``).

``connect`` subscribes the mapping when the app is ready (``chat.apps``), in every process: a page's
request, a compression thread and a Celery worker each publish, and each reaches the pages of any process.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from chat.services.events import (
    EventRecorded,
    GoalsChanged,
    HistoryChanged,
    LoginEnded,
    ProgressReported,
    subscribe,
)

logger = logging.getLogger(__name__)
PUBLISH_TIMEOUT_SECONDS = 5

# The message types the chat socket handles (its method of the same name, dots made underscores).
CONTEXT_EVENT = "context.event"
CONTEXT_PROGRESS = "context.progress"
CONTEXT_GOALS = "context.goals"
CHAT_HISTORY = "chat.history"
LOGIN_ENDED = "login.ended"
MESSAGE_TYPES = (CONTEXT_EVENT, CONTEXT_PROGRESS, CONTEXT_GOALS, CHAT_HISTORY, LOGIN_ENDED)

PageEvent = EventRecorded | ProgressReported | HistoryChanged | GoalsChanged | LoginEnded


def session_group(session_id: UUID) -> str:
    """The channel-layer group of a session's open pages."""
    return f"session-{session_id}"


def user_group(user_id: int) -> str:
    """The channel-layer group of a user's open chat sockets."""
    return f"user-{user_id}"


def channel_message(event: PageEvent) -> tuple[str, dict[str, Any]]:
    """The group ``event`` goes to, and the message it goes as."""
    match event:
        case EventRecorded():
            recorded = {
                "id": event.id,
                "type": event.type,
                "payload": event.payload,
                "created_at": event.created_at.isoformat(),
            }
            return session_group(event.session_id), {"type": CONTEXT_EVENT, "event": recorded}
        case ProgressReported():
            return session_group(event.session_id), {"type": CONTEXT_PROGRESS, "text": event.text}
        case HistoryChanged():
            return session_group(event.session_id), {"type": CHAT_HISTORY, "after_position": event.after_position}
        case GoalsChanged():
            return session_group(event.session_id), {"type": CONTEXT_GOALS}
        case LoginEnded():
            return user_group(event.user_id), {"type": LOGIN_ENDED, "session_key": event.session_key}


# The event loop the websocket consumers of this process run on. The in-memory channel
# layer's queues belong to it: a compression thread must hand its sends to that loop,
# or a waiting consumer is only woken by the loop's next unrelated wake-up.
_consumer_loop: asyncio.AbstractEventLoop | None = None


def consumer_loop_register(loop: asyncio.AbstractEventLoop) -> None:
    global _consumer_loop
    _consumer_loop = loop


def group_send(group: str, message: dict[str, Any]) -> None:
    """``message`` to the consumers in ``group``, from sync code: a request, a signal, a compression thread."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _consumer_loop
    in_memory = isinstance(layer, InMemoryChannelLayer)
    if in_memory and loop is not None and loop.is_running():
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not loop:
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop).result(
                timeout=PUBLISH_TIMEOUT_SECONDS
            )
            return
    async_to_sync(layer.group_send)(group, message)


def deliver(event: PageEvent) -> None:
    """``event`` to the open pages it concerns (its publisher logs a failure: a page misses one update)."""
    group_send(*channel_message(event))


def connect() -> None:
    """Called once, when the chat app is ready."""
    subscribe(EventRecorded, deliver)
    subscribe(ProgressReported, deliver)
    subscribe(HistoryChanged, deliver)
    subscribe(GoalsChanged, deliver)
    subscribe(LoginEnded, deliver)
