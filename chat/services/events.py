from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from chat.models import ContextEvent, EventType, Message, Session
from engine.core.recall import Recall
from engine.resources import count_text_tokens

logger = logging.getLogger(__name__)
PUBLISH_TIMEOUT_SECONDS = 5


def session_group(session_id: UUID) -> str:
    """The channel-layer group of a session's open pages."""
    return f"session-{session_id}"


def event_message(event: ContextEvent) -> dict[str, Any]:
    return {
        "type": "context.event",
        "event": {
            "id": event.id,
            "type": event.type,
            "payload": event.payload,
            "created_at": event.created_at.isoformat(),
        },
    }


# The event loop the websocket consumers of this process run on. The in-memory channel
# layer's queues belong to it: a compression thread must hand its sends to that loop,
# or a waiting consumer is only woken by the loop's next unrelated wake-up.
_consumer_loop: asyncio.AbstractEventLoop | None = None


def consumer_loop_register(loop: asyncio.AbstractEventLoop) -> None:
    global _consumer_loop
    _consumer_loop = loop


def _group_send(session_id: UUID, message: dict[str, Any]) -> None:
    group_send(session_group(session_id), message)


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


def _publish(event: ContextEvent) -> None:
    try:
        _group_send(event.session_id, event_message(event))
    except Exception:  # a page missing one live update must not undo the event
        logger.exception("could not publish %s event %s", event.type, event.id)


def progress_publish(*, session_id: UUID, text: str) -> None:
    """A passing progress line for open pages ("Aging checkpoint 2 of 3…"); not stored.

    Precondition: called outside a transaction (from the compression's LLM phase)."""
    try:
        _group_send(session_id, {"type": "context.progress", "text": text})
    except Exception:
        logger.exception("could not publish progress for session %s", session_id)


def history_publish(*, session_id: UUID, after_position: int | None = None) -> None:
    """Tell the session's open pages that messages were written elsewhere than on a chat page (a turn
    through the API or an Ollama or OpenAI client), so each shows the history anew; ``after_position``:
    only messages after that position were added (nothing before them changed), which the pages append.

    Precondition: called once the messages are committed."""
    try:
        _group_send(session_id, {"type": "chat.history", "after_position": after_position})
    except Exception:  # a page missing one live update must not fail the turn
        logger.exception("could not publish new messages of session %s", session_id)


def goals_publish(*, session_id: UUID) -> None:
    """Tell the session's open pages that its goals, decisions or artifacts changed (not an event of
    the spec's: nothing is stored), so each shows the goals panel and the meter anew.

    Precondition: called once the change is committed."""
    try:
        _group_send(session_id, {"type": "context.goals"})
    except Exception:  # a page missing one live update must not undo the change
        logger.exception("could not publish a goal change of session %s", session_id)


def event_record(
    *, session: Session, type: EventType, payload: dict[str, Any] | None = None, publish: bool = True
) -> ContextEvent:
    """Persist one of the spec's events (inside the caller's transaction, if any) and, once that
    commits and ``publish`` says so, publish it to the session's group so open pages see it as it happens."""
    event = ContextEvent.objects.create(session=session, type=type, payload=payload or {})
    if publish:
        transaction.on_commit(lambda: _publish(event))
    return event


def recall_record(*, session: Session, message: Message, found: Recall) -> ContextEvent:
    """Record that the prompt answering ``message`` recalled ``found`` from the history: which
    messages, with the words of ``message`` each was recalled for. Not published: the turn's own
    frames tell the page, which must not re-render its history before every reply."""
    return event_record(
        session=session,
        type=EventType.RECALLED,
        publish=False,
        payload={
            "message": message.position,
            "tokens": count_text_tokens(found.text),
            "items": [
                {"position": item.candidate.position, "role": item.candidate.role, "score": round(item.score, 3),
                 "words": list(item.words)}
                for item in found.items
            ],
        },
    )  # fmt: skip


def user_group(user_id: int) -> str:
    """The channel-layer group of a user's open chat sockets (``chat.web.consumers``)."""
    return f"user-{user_id}"


def user_sockets_recheck(*, user_id: int, logged_out_session: str | None = None) -> None:
    """Tell the user's open chat sockets their login may have ended, so they close (4401) at once rather than
    at their next frame: those of ``logged_out_session`` (the Django session a logout ends) do, and every other
    one checks its own session afresh (a password change or a deactivation ends it; another browser's logout
    does not)."""
    try:
        group_send(user_group(user_id), {"type": "login.ended", "session_key": logged_out_session})
    except Exception:  # the sockets still end at their next frame
        logger.exception("could not tell the open sockets of user %s that a login ended", user_id)
