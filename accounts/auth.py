"""The API's two ways in: a personal token, or the browser's session cookie with CSRF."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer, SessionAuth

from accounts.services import api_token_authenticate


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any | None:
        if not token:
            return None
        return api_token_authenticate(raw=token)


class CookieAuth(SessionAuth):
    """ninja's session auth, which checks CSRF on unsafe methods, asked only when a user is logged in:
    a request with neither a session nor a valid token gets 401, not a CSRF 403."""

    def __call__(self, request: HttpRequest) -> Any | None:
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)


def api_user(request: HttpRequest) -> Any:
    """The user the token or the session cookie authenticated (set by ninja on ``request.auth``)."""
    return request.auth  # type: ignore[attr-defined]
