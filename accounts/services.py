"""Writes to accounts: the first account from the browser, API tokens (create, revoke, and the
use that authenticates a request), and the end of a login's open chat sockets."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import MAX_TOKEN_NAME_LENGTH, ApiToken
from engine.core.text import storable_text

# A request with a token refreshes ``last_used_at`` at most this often, so a busy
# script does not turn every read into a write.
LAST_USED_PRECISION = timedelta(minutes=1)
# The PostgreSQL advisory lock that makes "no account yet? then create it" one step ("ollm").
FIRST_ACCOUNT_LOCK = 0x6F6C6C6D


class AccountsExist(Exception):
    """The first account is made once: an account exists already."""


@transaction.atomic
def first_account_create(*, username: str, password: str) -> Any:
    """The install's first account, its administrator (staff and superuser), made while no account exists.

    Preconditions: ``username`` and ``password`` passed the first-account form (Django's username
    rules, the password typed twice alike, ``AUTH_PASSWORD_VALIDATORS``). Raises ``AccountsExist``
    when any account exists, even one a concurrent request has just made: the check and the create
    run under one lock, so two requests at once make one administrator, never two.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [FIRST_ACCOUNT_LOCK])
    # On SQLite every transaction begins IMMEDIATE (settings.DATABASES): this one holds the
    # database's write lock from its start, and a concurrent one waits at its BEGIN for this commit.
    users = get_user_model().objects
    if users.exists():
        raise AccountsExist("An account exists already: log in, or ask the administrator for one.")
    return users.create_superuser(username=username, email="", password=password)


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


@transaction.atomic
def api_token_create(*, user: Any, name: str) -> tuple[ApiToken, str]:
    """A new token for ``user``; returns it with the token text, which is not stored and cannot be shown again."""
    name = storable_text(name).strip()
    if not name:
        raise ValidationError({"name": "Name the token (what will use it?)."})
    if len(name) > MAX_TOKEN_NAME_LENGTH:
        raise ValidationError({"name": f"name is {len(name):,} characters long; the limit is {MAX_TOKEN_NAME_LENGTH}."})
    raw = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, token_hash=token_hash(raw), prefix=raw[:8])
    return token, raw


@transaction.atomic
def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token for good (revoking it again changes nothing)."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def api_token_authenticate(*, raw: str) -> Any | None:
    """The active user of a live token, or None; records when the token was last used."""
    token = api_token_use(raw=raw)
    return token.user if token is not None else None


def api_token_use(*, raw: str) -> ApiToken | None:
    """The live token ``raw`` is, of an active user (``user`` loaded), or None; records when it was last used."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=token_hash(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    # Written at most once a LAST_USED_PRECISION, so most requests make no write at all.
    if token.last_used_at is None or token.last_used_at < now - LAST_USED_PRECISION:
        ApiToken.objects.filter(
            Q(pk=token.pk) & (Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_PRECISION))
        ).update(last_used_at=now)
    return token


@transaction.atomic
def api_token_tasks_set(*, token: ApiToken, apart: bool) -> ApiToken:
    """Whether the background tasks of the token's client are answered apart, without a session
    (``chat.services.client_tasks``), or as turns of sessions of their own. Precondition: the caller owns ``token``."""
    if token.tasks_apart != apart:
        token.tasks_apart = apart
        token.save(update_fields=["tasks_apart"])
    return token
