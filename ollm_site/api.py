"""The REST API under /api/: one NinjaAPI, the apps' routers, auth and the error shapes.

Every error answers ``{"detail": ...}``: 401 without valid credentials, 403 for
a cookie request without its CSRF token or a staff-only route (the model hosts)
asked by anyone else, 404 for what is not the caller's,
409 when a compression holds the session, a session file was imported
before or the session's model is not available here (503 when only because
its backend is down), 413 for what is too large (a message for the context, a file to
import), 422 for invalid input, 502-504 when the model cannot answer. Every
time is written ``YYYY-MM-DDTHH:MM:SS.mmmZ``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder

from accounts.auth import CookieAuth, TokenAuth
from chat.api.context import router as context_router
from chat.api.responses import AfterSendResponse
from chat.api.sessions import router as chat_router
from chat.formats.file_checks import ImportTooLarge
from chat.selectors.sessions import ModelUnavailable
from chat.services.files import ImportConflict
from chat.services.snapshots import SnapshotError
from engine.core.times import iso_millis
from engine.llm.types import BackendUnavailable, ContextOverflow, LLMError, LLMTimeout
from search.api import router as search_router


class _Encoder(NinjaJSONEncoder):
    """Every time in one format, the session file's: ``2026-01-27T14:02:11.482Z`` (Django's encoder writes
    no fraction for a whole second, and ``.482`` or ``+00:00`` otherwise)."""

    def default(self, o: Any) -> Any:
        if isinstance(o, datetime):
            return iso_millis(o)
        return super().default(o)


class _Renderer(JSONRenderer):
    encoder_class = _Encoder


class _API(NinjaAPI):
    def create_temporal_response(self, request: HttpRequest) -> HttpResponse:
        """The response a view fills in, which may act once sent (``chat.api.responses.after_sent``)."""
        return AfterSendResponse("", content_type=self.get_content_type())


def docs_access(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The API's map (/api/openapi.json and /api/docs) for whoever may use the API: a logged-in browser
    or a valid ``Authorization: Bearer <token>``. Without either, a browser goes to the login page;
    a wrong token gets 401, as on any other endpoint."""

    token_auth = TokenAuth()

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if "Authorization" in request.headers:
            if token_auth(request) is not None:
                return view(request, *args, **kwargs)
            return JsonResponse({"detail": "Unauthorized"}, status=401)
        return redirect_to_login(request.get_full_path())

    return wrapper


api = _API(
    title="ollm-site API",
    version="1",
    description="Long conversations with small-context local LLMs. Authenticate with "
    "`Authorization: Bearer <token>` (create one at [/account/tokens/](/account/tokens/) or with "
    "`python manage.py create_api_token <username>`) or with the session cookie plus its CSRF token.",
    auth=[TokenAuth(), CookieAuth()],
    urls_namespace="api",
    renderer=_Renderer(),
    # Only login, static files and /health answer anonymously: the API's map included.
    docs_decorator=docs_access,
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


@api.exception_handler(ImportConflict)
def import_conflict(request: HttpRequest, exc: ImportConflict) -> HttpResponse:
    """A second import of a file: the session that has its sessionId already, for the client to choose."""
    return api.create_response(request, {"detail": exc.message, "session_id": exc.session_id}, status=409)


@api.exception_handler(SnapshotError)
def snapshot_conflict(request: HttpRequest, exc: SnapshotError) -> HttpResponse:
    return _detail(request, str(exc), 409)


@api.exception_handler(LLMError)
def llm_failed(request: HttpRequest, exc: LLMError) -> HttpResponse:
    """The model could not answer; a user's message is already stored by then. Staff read which hosts
    were tried and why; anyone else, that the model is unavailable, never a host's URL (issue 49, item 5)."""
    user = getattr(request, "auth", None) or getattr(request, "user", None)
    text = exc.shown_to(staff=bool(getattr(user, "is_staff", False)))
    if isinstance(exc, ModelUnavailable):
        # Switching the session's model (PATCH) resolves it; a backend that is down may come back by itself.
        return _detail(request, text, 503 if exc.backend_down else 409)
    if isinstance(exc, ContextOverflow):
        return _detail(request, text, 413)
    if isinstance(exc, BackendUnavailable):
        return _detail(request, text, 503)
    if isinstance(exc, LLMTimeout):
        return _detail(request, text, 504)
    return _detail(request, text, 502)
