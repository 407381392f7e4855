"""Reads of chat sessions, always scoped to the user who asks."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from chat.models import Session


def sessions_for_user(*, user: Any) -> QuerySet[Session]:
    """The sessions a user may see: their own, most recently active first."""
    return Session.objects.filter(owner=user).order_by("-last_activity")
