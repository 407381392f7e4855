from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from accounts.models import ApiToken


def tokens_for_user(*, user: Any) -> QuerySet[ApiToken]:
    """A user's tokens, live and revoked, newest first."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")
