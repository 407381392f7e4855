from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from accounts.selectors import tokens_for_user
from accounts.services import api_token_create, api_token_revoke


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """List the user's API tokens and make a new one; the new token is shown on this response only."""
    created = error = None
    status = 200
    if request.method == "POST":
        try:
            token, raw = api_token_create(user=request.user, name=request.POST.get("name", ""))
            created = {"token": token, "raw": raw}
            status = 201
        except ValidationError as exc:
            error = "; ".join(exc.messages)
            status = 422
    context = {"tokens": tokens_for_user(user=request.user), "created": created, "error": error}
    return render(request, "accounts/tokens.html", context, status=status)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    api_token_revoke(token=get_object_or_404(tokens_for_user(user=request.user), pk=token_id))
    return redirect("accounts:tokens")
