from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from accounts.models import ApiToken


def tokens_for_user(*, user: Any) -> QuerySet[ApiToken]:
    """A user's tokens, live and revoked, newest first."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def accounts_exist() -> bool:
    """Whether any user account exists (active or not): until one does, the first one may be made
    from the browser."""
    return get_user_model().objects.exists()
