"""``GET /health``: does this process answer and does its database? For Docker healthchecks and load balancers.

A middleware, first in the chain, so the probe needs neither a host among ALLOWED_HOSTS
nor https (Docker probes http://127.0.0.1 inside the container). Anonymous, and it says
nothing beyond ``{"status": "ok", "version": ...}`` (200) or ``{"status": "unavailable", "version": ...}``
(503), the version being the release (pyproject.toml's, ``settings.OLLM_VERSION``), which the login page's
footer shows anyway; the reason of a failure goes to the log only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

HEALTH_PATH = "/health"


def database_answers() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            row = cursor.fetchone()
            return row is not None and row[0] == 1
    except Exception:
        logger.exception("Health check: the database does not answer")
        return False


class HealthMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info != HEALTH_PATH:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response: HttpResponse = JsonResponse({"detail": "Method not allowed."}, status=405)
            response["Allow"] = "GET, HEAD"
            return response
        if database_answers():
            response = JsonResponse({"status": "ok", "version": settings.OLLM_VERSION})
        else:
            response = JsonResponse({"status": "unavailable", "version": settings.OLLM_VERSION}, status=503)
        response["Cache-Control"] = "no-store"
        return response
