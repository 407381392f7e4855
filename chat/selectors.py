"""Reads of chat sessions, always scoped to the user who asks."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from chat.models import Message, Session
from contextmgr.llm import Gateway, LLMError, ModelInfo, ModelNotFound, get_gateway

# How many of the latest messages the chat page shows; "earlier" pages back by as many (a search hit
# further back is shown in its own window). Rendering is what a page costs: 100 keep a long
# session's page well under 200 ms of server time (bench/page_load.py).
HISTORY_WINDOW = 100


def sessions_for_user(*, user: Any) -> QuerySet[Session]:
    """The sessions a user may see: their own, most recently active first."""
    return Session.objects.filter(owner=user).order_by("-last_activity")


def session_for_viewer(*, user: Any, session_id: UUID) -> Session | None:
    """A session the user may look at: their own, or any when they are staff (read-only)."""
    sessions = Session.objects.all() if user.is_staff else Session.objects.filter(owner=user)
    return sessions.filter(pk=session_id).first()


def session_for_owner(*, user: Any, session_id: UUID) -> Session | None:
    """A session the user may change: only their own."""
    return Session.objects.filter(owner=user, pk=session_id).first()


def session_history(*, session: Session) -> QuerySet[Message]:
    """The full history in order, with the checkpoint that covers each compressed message."""
    return Message.objects.filter(session=session).select_related("compressed_into").order_by("position")


def model_facts(*, model: str, gateway: Gateway | None = None) -> ModelInfo | None:
    """What the backend knows of a model (size, native context length); None when it cannot be asked now.

    Raises ValidationError for a model no enabled backend has.
    """
    model = model.strip()
    if not model:
        return None  # session_create says what is wrong with it
    try:
        return async_to_sync((gateway or get_gateway()).model_info)(model)
    except ModelNotFound as exc:
        raise ValidationError({"model": str(exc)}) from exc
    except LLMError:
        # Ollama is down or slow: the session is still made, and its first turn says what is wrong.
        return None
