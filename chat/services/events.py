"""The domain's events: what the services tell whoever listens, as typed values, and the spec's events they store.

A service publishes an event (``publish``) and knows nothing of who hears it: the chat pages hear the
notifications through ``chat.web.channel_events``, which maps each to a channel-layer message, and the
requests for background work reach ``chat.tasks.task_dispatch``, which runs them in a Celery worker or in a
thread of this process. Both subscribe when the app is ready (``chat.apps``). Nothing here names a channel
group, a message type, a task or a broker's setting.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from django.db import transaction

from chat.models import ContextEvent, EventType, Message, Session
from engine.core.recall import Recall
from engine.resources import count_text_tokens

logger = logging.getLogger(__name__)


# What open pages are told, as it happens.


@dataclass(frozen=True)
class EventRecorded:
    """One of the spec's events was stored and committed (``event_record``): a compression started or
    ended, a checkpoint aged, a snapshot was taken, the context changed…"""

    session_id: UUID
    id: int
    type: str
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class ProgressReported:
    """A passing progress line of a compression ("Aging checkpoint 2 of 3…"); not stored."""

    session_id: UUID
    text: str


@dataclass(frozen=True)
class HistoryChanged:
    """Messages were written elsewhere than on a chat page; ``after_position``: only after it (None: anywhere)."""

    session_id: UUID
    after_position: int | None = None


@dataclass(frozen=True)
class GoalsChanged:
    """The session's goals, decisions or artifacts changed."""

    session_id: UUID


@dataclass(frozen=True)
class LoginEnded:
    """A login of the user may have ended; ``session_key``: the Django session a logout ended, if one did."""

    user_id: int
    session_key: str | None = None


# What is asked to run in the background.


@dataclass(frozen=True)
class CompressionRequested:
    """Run attempt ``attempt`` of a compression of the session (``compression_attempt``) in ``delay`` seconds;
    ``token``: the pending retry it is (``compression_retry_pend``), None for a first attempt."""

    session_id: UUID
    reason: str
    force: bool = False
    attempt: int = 1
    token: str | None = None
    delay: float = 0


@dataclass(frozen=True)
class CompressionRetryDropped:
    """No retry of a compression waits for the session any more: one still waiting to run need not."""

    session_id: UUID


@dataclass(frozen=True)
class TitleRequested:
    """Write the session's title (``session_title_write``)."""

    session_id: UUID


E = TypeVar("E")

# The handlers of each type of event, in the order they subscribed.
_handlers: dict[type[Any], list[Callable[[Any], None]]] = {}
_handlers_lock = threading.Lock()


def subscribe(event_type: type[E], handler: Callable[[E], None]) -> None:
    """Call ``handler`` with each event of ``event_type`` published from now on (once, however often it subscribes)."""
    with _handlers_lock:
        handlers = _handlers.setdefault(event_type, [])
        if handler not in handlers:
            handlers.append(handler)


def unsubscribe(event_type: type[E], handler: Callable[[E], None]) -> None:
    with _handlers_lock:
        if handler in _handlers.get(event_type, []):
            _handlers[event_type].remove(handler)


def subscribers(event_type: type[Any]) -> tuple[Callable[[Any], None], ...]:
    """The handlers that hear each event of ``event_type``."""
    return tuple(_handlers.get(event_type, ()))


def publish(event: object) -> None:
    """Hand ``event`` to the handlers of its type, in this thread, now; a handler's error reaches the caller."""
    for handler in list(_handlers.get(type(event), ())):
        handler(event)


def _publish_recorded(event: ContextEvent) -> None:
    recorded = EventRecorded(
        session_id=event.session_id, id=event.id, type=event.type, payload=event.payload, created_at=event.created_at
    )
    try:
        publish(recorded)
    except Exception:  # a page missing one live update must not undo the event
        logger.exception("could not publish %s event %s", event.type, event.id)


def progress_publish(*, session_id: UUID, text: str) -> None:
    """A passing progress line for open pages ("Aging checkpoint 2 of 3…"); not stored.

    Precondition: called outside a transaction (from the compression's LLM phase)."""
    try:
        publish(ProgressReported(session_id=session_id, text=text))
    except Exception:
        logger.exception("could not publish progress for session %s", session_id)


def history_publish(*, session_id: UUID, after_position: int | None = None) -> None:
    """Tell the session's open pages that messages were written elsewhere than on a chat page (a turn
    through the API or an Ollama or OpenAI client), so each shows the history anew; ``after_position``:
    only messages after that position were added (nothing before them changed), which the pages append.

    Precondition: called once the messages are committed."""
    try:
        publish(HistoryChanged(session_id=session_id, after_position=after_position))
    except Exception:  # a page missing one live update must not fail the turn
        logger.exception("could not publish new messages of session %s", session_id)


def goals_publish(*, session_id: UUID) -> None:
    """Tell the session's open pages that its goals, decisions or artifacts changed (not an event of
    the spec's: nothing is stored), so each shows the goals panel and the meter anew.

    Precondition: called once the change is committed."""
    try:
        publish(GoalsChanged(session_id=session_id))
    except Exception:  # a page missing one live update must not undo the change
        logger.exception("could not publish a goal change of session %s", session_id)


def event_record(
    *, session: Session, type: EventType, payload: dict[str, Any] | None = None, publish: bool = True
) -> ContextEvent:
    """Persist one of the spec's events (inside the caller's transaction, if any) and, once that
    commits and ``publish`` says so, publish it (``EventRecorded``) so open pages see it as it happens."""
    event = ContextEvent.objects.create(session=session, type=type, payload=payload or {})
    if publish:
        transaction.on_commit(lambda: _publish_recorded(event))
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


def user_sockets_recheck(*, user_id: int, logged_out_session: str | None = None) -> None:
    """Tell the user's open chat sockets their login may have ended, so they close (4401) at once rather than
    at their next frame: those of ``logged_out_session`` (the Django session a logout ends) do, and every other
    one checks its own session afresh (a password change or a deactivation ends it; another browser's logout
    does not)."""
    try:
        publish(LoginEnded(user_id=user_id, session_key=logged_out_session))
    except Exception:  # the sockets still end at their next frame
        logger.exception("could not tell the open sockets of user %s that a login ended", user_id)
