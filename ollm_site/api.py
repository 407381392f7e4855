"""The REST API under /api/: one NinjaAPI, the apps' routers, auth and the error shapes.

Every error answers ``{"detail": ...}``: 401 without valid credentials, 403 for
a cookie request without its CSRF token, 404 for what is not the caller's,
409 when a compression holds the session, 413 for what is too large (a
message for the context, a file to import), 422 for invalid input, 502-504
when the model cannot answer.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI

from accounts.auth import CookieAuth, TokenAuth
from chat.api import router as chat_router
from chat.imports import ImportTooLarge
from contextmgr.api import router as context_router
from contextmgr.llm.types import BackendUnavailable, ContextOverflow, LLMError, LLMTimeout
from contextmgr.services.snapshots import SnapshotError
from search.api import router as search_router

api = NinjaAPI(
    title="ollm-site API",
    version="1",
    description="Long conversations with small-context local LLMs. Authenticate with "
    "`Authorization: Bearer <token>` (create one at [/account/tokens/](/account/tokens/) or with "
    "`python manage.py create_api_token <username>`) or with the session cookie plus its CSRF token.",
    auth=[TokenAuth(), CookieAuth()],
    urls_namespace="api",
    # Only login, static files and /health answer anonymously: the API's map included.
    docs_decorator=login_required,
)
api.add_router("/", chat_router)
api.add_router("/", context_router)
api.add_router("/search", search_router)


def _detail(request: HttpRequest, detail: str, status: int) -> HttpResponse:
    return api.create_response(request, {"detail": detail}, status=status)


@api.exception_handler(DjangoValidationError)
def invalid(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
    return _detail(request, " ".join(exc.messages), 413 if isinstance(exc, ImportTooLarge) else 422)


@api.exception_handler(RequestDataTooBig)
def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return _detail(request, "The request body is too large.", 413)


@api.exception_handler(SnapshotError)
def snapshot_conflict(request: HttpRequest, exc: SnapshotError) -> HttpResponse:
    return _detail(request, str(exc), 409)


@api.exception_handler(LLMError)
def llm_failed(request: HttpRequest, exc: LLMError) -> HttpResponse:
    """The model could not answer; a user's message is already stored by then."""
    if isinstance(exc, ContextOverflow):
        return _detail(request, str(exc), 413)
    if isinstance(exc, BackendUnavailable):
        return _detail(request, str(exc), 503)
    if isinstance(exc, LLMTimeout):
        return _detail(request, str(exc), 504)
    return _detail(request, str(exc), 502)
