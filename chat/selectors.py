"""Reads of chat sessions, always scoped to the user who asks."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db.models import QuerySet

from chat.models import Message, Session

# How many of the latest messages the chat page shows (a search hit further back is shown in its own window).
HISTORY_WINDOW = 300


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
