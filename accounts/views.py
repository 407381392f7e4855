from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts.selectors import accounts_exist, tokens_for_user, tokens_with_usage
from accounts.services import (
    AccountsExist,
    api_token_create,
    api_token_revoke,
    api_token_tasks_set,
    first_account_create,
)

# The session key that carries a new token from the POST that made it to the one GET that shows it.
NEW_TOKEN_SESSION_KEY = "accounts_new_api_token"


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """List the user's API tokens and make a new one.

    A POST that makes a token redirects here (so a refresh does not make another), and the new
    token is shown on the next GET only: it waits in the session in between. Never cached.
    """
    error = None
    status = 200
    if request.method == "POST":
        try:
            token, raw = api_token_create(user=request.user, name=request.POST.get("name", ""))
        except ValidationError as exc:
            error = "; ".join(exc.messages)
            status = 422
        else:
            request.session[NEW_TOKEN_SESSION_KEY] = {"name": token.name, "raw": raw}
            return redirect("accounts:tokens")
    created = request.session.pop(NEW_TOKEN_SESSION_KEY, None) if request.method == "GET" else None
    context = {
        "tokens": tokens_with_usage(user=request.user),
        "loopback_user": settings.OLLM_LOOPBACK_USER,
        "created": created,
        "error": error,
    }
    return render(request, "accounts/tokens.html", context, status=status)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    api_token_revoke(token=get_object_or_404(tokens_for_user(user=request.user), pk=token_id))
    return redirect("accounts:tokens")


@login_required
@require_POST
def token_tasks(request: HttpRequest, token_id: int) -> HttpResponse:
    """Keep the background tasks of the token's client apart (``apart=on``), or make them sessions."""
    token = get_object_or_404(tokens_for_user(user=request.user), pk=token_id)
    api_token_tasks_set(token=token, apart=request.POST.get("apart") == "on")
    return redirect("accounts:tokens")


# --- the first account, and the login page ------------------------------------------------------


@never_cache
@require_http_methods(["GET", "POST"])
def first_account(request: HttpRequest) -> HttpResponse:
    """While no account exists, make the first one, the administrator, and log it in.

    Open without a login only then: once any account exists this page is gone and sends
    everyone, on every method, to the login page.
    """
    if accounts_exist():
        return redirect("login")
    form: UserCreationForm[Any] = UserCreationForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            user = first_account_create(username=form.cleaned_data["username"], password=form.cleaned_data["password1"])
        except AccountsExist:  # another request made it between the check above and this one
            return redirect("login")
        # The account was made with this password a moment ago: no credentials to check (nor to throttle).
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("chat:session_list")
    status = 422 if form.is_bound else 200
    return render(request, "registration/first_account.html", {"form": form}, status=status)


class LoginView(auth_views.LoginView):
    """Django's login page, except while no account exists: no one can log in yet, so it sends
    the visitor (and ``/``, which sends anonymous visitors here) to make the first account."""

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not accounts_exist():
            return redirect("accounts:first_account")
        return super().get(request, *args, **kwargs)


# --- brute-force protection on login (django-axes, see AXES_* in the settings) ------------------


def login_client_address(request: HttpRequest) -> str | None:
    """The address a login's failures count against (``AXES_CLIENT_IP_CALLABLE``).

    Behind a reverse proxy (``OLLM_BEHIND_PROXY``), every request comes from the proxy, so the
    last ``X-Forwarded-For`` entry, the one the proxy appended, names the client; otherwise the
    peer address. A client's own earlier entries are not trusted.
    """
    if getattr(settings, "SECURE_PROXY_SSL_HEADER", None):
        header = str(request.META.get("HTTP_X_FORWARDED_FOR", ""))
        forwarded = [a.strip() for a in header.split(",") if a.strip()]
        if forwarded:
            return forwarded[-1]
    address = request.META.get("REMOTE_ADDR")
    return str(address) if address else None


def login_lock_remaining(request: HttpRequest, credentials: dict[str, Any] | None) -> timedelta:
    """How long the lock on this login attempt still lasts: from the last counted failure of each
    count that locks it (``LoginThrottle.lock_counts``), the cool-off time."""
    cool_off = get_cool_off(request) or timedelta(0)
    now = timezone.now()
    handler = AxesProxyHandler.get_implementation()
    counts: list[Any] = getattr(handler, "lock_counts", lambda *a: [])(request, credentials)
    ends = [count.last + cool_off for count in counts if count.locks]
    return max(max(ends, default=now + cool_off) - now, timedelta(0))


def login_locked_out(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any] | None
) -> HttpResponse:
    """The answer to a login refused by the lock (``AXES_LOCKOUT_CALLABLE``): the login page,
    429, saying when to try again. The same for the admin's login."""
    minutes = max(1, math.ceil(login_lock_remaining(request, credentials).total_seconds() / 60))
    context = {
        "form": AuthenticationForm(request),
        "next": request.POST.get("next") or request.GET.get("next", ""),
        "locked_out": True,
        "lock_minutes": minutes,
    }
    return render(request, "registration/login.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)
