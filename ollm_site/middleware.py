"""Middleware of the project's own that is not about one feature."""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control

# Every script and style sheet is served from /static (htmx included). Styles allow 'unsafe-inline'
# because of the meter bars' computed ``style="width: N%"`` attributes and the indicator style
# element htmx injects; scripts allow nothing inline (no <script> bodies, no on* handlers).
# The REST API's Swagger page (/api/docs) needs no exception: its scripts are files under /static
# and its settings are a JSON <script>, which the policy does not run. ``{ws}``: the chat socket.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self' {ws}; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'"
)


class SyncChainASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain built as under WSGI: synchronous from the
    first middleware to the view. A request enters its thread once and stays in it to the response,
    which the handler then sends asynchronously (a streaming one too).

    Django builds the chain in its handler's mode, async under ASGI, so every synchronous
    middleware hook and every view (all of them are synchronous here) costs a thread switch and back
    through the event loop, which a busy loop (other requests, the chat sockets) makes wait:
    docs/benchmarks.md, "Figures behind choices".
    """

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain: Callable[[HttpRequest], HttpResponse] = self._middleware_chain  # type: ignore[has-type]
        # The request's own thread (its ThreadSensitiveContext's), as Django runs a synchronous view.
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)


class SecurityHeadersMiddleware:
    """A Content-Security-Policy on every response (``OLLM_CONTENT_SECURITY_POLICY`` replaces the
    default; a response that has its own is left alone), and ``Cache-Control: no-store`` on
    every response of the REST API and the drop-in endpoints, whose answers carry a user's data to scripts,
    and on every download (an export or an archive from a page): a shared browser keeps no copy."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy(request)
        downloaded = response.get("Content-Disposition", "").startswith("attachment")
        if downloaded or request.path_info.startswith(("/api/", "/ollama/", "/v1/")):
            patch_cache_control(response, no_store=True)
        return response

    @staticmethod
    def policy(request: HttpRequest) -> str:
        policy: str = getattr(settings, "OLLM_CONTENT_SECURITY_POLICY", "") or CONTENT_SECURITY_POLICY
        try:
            host = request.get_host()
        except DisallowedHost:
            ws = ""
        else:
            # 'self' covers the page's own ws(s):// in current browsers; older ones need it named.
            ws = f"ws://{host} wss://{host}"
        return policy.replace("{ws}", ws).replace("  ", " ").replace(" ;", ";")
