from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, F, QuerySet, Sum
from django.db.models.functions import Coalesce

from accounts.models import ApiToken


def tokens_for_user(*, user: Any) -> QuerySet[ApiToken]:
    """A user's tokens, live and revoked, newest first."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def tokens_with_usage(*, user: Any) -> QuerySet[ApiToken]:
    """A user's tokens as ``tokens_for_user``, each with the background tasks its client had answered
    apart (``task_count``) and the tokens they took (``task_tokens``: prompts and answers)."""
    return tokens_for_user(user=user).annotate(
        task_count=Count("client_tasks"),
        task_tokens=Coalesce(Sum(F("client_tasks__prompt_tokens") + F("client_tasks__completion_tokens")), 0),
    )


def accounts_exist() -> bool:
    """Whether any user account exists (active or not): until one does, the first one may be made
    from the browser."""
    return get_user_model().objects.exists()


def loopback_user() -> Any | None:
    """The active account ``OLLM_LOOPBACK_USER`` names (the drop-in endpoints' requests without a token
    from this machine act as it), or None: the setting is off, or names no active account."""
    if not settings.OLLM_LOOPBACK_USER:
        return None
    return get_user_model().objects.filter(username=settings.OLLM_LOOPBACK_USER, is_active=True).first()
