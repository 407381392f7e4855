"""Reads of chat sessions, always scoped to the user who asks."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from chat.models import Message, Session
from contextmgr.llm import Gateway, LLMError, ModelInfo, ModelNotFound, get_gateway


def sessions_for_user(*, user: Any) -> QuerySet[Session]:
    """The sessions a user may see: their own, most recently active first."""
    return Session.objects.filter(owner=user).order_by("-last_activity")


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


def session_history(*, session: Session) -> QuerySet[Message]:
    """Every message of the session, compressed or not, in order."""
    return Message.objects.filter(session=session).order_by("position")
