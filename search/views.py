"""The search page and the zip of every session matching a search. Thin: parse, call the selector, render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from chat.selectors.sessions import sessions_for_user
from chat.services.files import sessions_zip_response
from search.forms import SearchForm
from search.selectors import search_history, sessions_matching


def _form(request: HttpRequest) -> SearchForm:
    models = sorted(set(sessions_for_user(user=request.user).values_list("model", flat=True)))
    form = SearchForm(request.GET, models=models)
    form.is_valid()
    return form


@login_required
@require_GET
def search_page(request: HttpRequest) -> HttpResponse:
    form = _form(request)
    filters = form.filters()
    results = search_history(user=request.user, query=form.query, filters=filters, page=form.value("page") or 1)
    params = request.GET.copy()
    params.pop("page", None)
    return render(
        request,
        "search/search.html",
        {"form": form, "results": results, "search_query": form.query, "params": params.urlencode()},
    )


@login_required
@require_GET
def search_export(request: HttpRequest) -> HttpResponse:
    """A zip of the OLLM session files of every session of the user's that matches the search."""
    form = _form(request)
    sessions = sessions_matching(user=request.user, query=form.query, filters=form.filters())
    return sessions_zip_response(sessions=list(sessions), name="ollm-search-export")
