"""Which pages may open a websocket: the site's own origin, or one the settings trust.

A browser sends the page's ``Origin`` with every websocket handshake and the session cookie
with it, so a socket from another site would act as the user (cross-site websocket hijacking).
An origin is compared whole, scheme, host and port (``http://localhost:1234`` is another site
than ``http://localhost:8000``), against:

- the origin the request was made to: its ``Host`` header (which must be one of
  ``ALLOWED_HOSTS``, as Django requires of every HTTP request) with ``http`` for ``ws`` and
  ``https`` for ``wss``, or for ``X-Forwarded-Proto: https`` when ``SECURE_PROXY_SSL_HEADER``
  says a TLS-terminating proxy sets it;
- ``OLLM_TRUSTED_ORIGINS`` (``CSRF_TRUSTED_ORIGINS`` unless set): full origins such as
  ``https://chat.example.com`` for a reverse proxy that rewrites the Host, ``https://*.example.com``
  for every subdomain.

A handshake without a Host header (not HTTP/1.1; in-process test clients) is taken to be made
to one of ``ALLOWED_HOSTS`` on the scheme's default port. One without an Origin is refused, as
channels' own validator refuses it: browsers always send one, and other clients can send it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import validate_host

Origin = tuple[str, str, int]  # scheme, lower-case host (an IPv6 literal without brackets), port
DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_origin(value: str) -> Origin | None:
    """``(scheme, host, port)`` of an http(s) origin, or None when it is not one."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:  # a port that is no number or out of range, a broken IPv6 literal
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") or "@" in parts.netloc:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme]


def host_origin(scheme: str, host: str) -> Origin | None:
    """The origin of a request made with ``scheme`` to ``host`` (a Host header: ``name[:port]``)."""
    return parse_origin(f"{scheme}://{host}")


def trusted_origins() -> list[str]:
    configured = getattr(settings, "OLLM_TRUSTED_ORIGINS", None)
    return list(configured if configured is not None else settings.CSRF_TRUSTED_ORIGINS)


def origin_trusted(origin: Origin, pattern: str) -> bool:
    """``origin`` matches a trusted origin; ``scheme://*.example.com`` trusts every subdomain."""
    wildcard = "://*." in pattern
    trusted = parse_origin(pattern.replace("://*.", "://", 1) if wildcard else pattern)
    if trusted is None:
        return False
    scheme, host, port = origin
    if wildcard:
        return (scheme, port) == (trusted[0], trusted[2]) and host.endswith("." + trusted[1])
    return origin == trusted


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def request_scheme(scope: dict[str, Any]) -> str:
    """``https`` for a socket over TLS, here or at a proxy ``SECURE_PROXY_SSL_HEADER`` trusts."""
    if scope.get("scheme") == "wss":
        return "https"
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        meta_name, secure_value = proxy_header
        name = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        value = _header(scope.get("headers", []), name)
        if value is not None and value.split(",", 1)[0].strip() == secure_value:
            return "https"
    return "http"


def site_origins(scope: dict[str, Any]) -> list[Origin]:
    """The origins of the site the handshake was made to."""
    scheme = request_scheme(scope)
    allowed_hosts = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed_hosts:  # as Django does
        allowed_hosts = [".localhost", "127.0.0.1", "[::1]"]
    host = _header(scope.get("headers", []), b"host")
    if host is not None:
        origin = host_origin(scheme, host)
        if origin is None or not validate_host(origin[1] if ":" not in origin[1] else f"[{origin[1]}]", allowed_hosts):
            return []
        return [origin]
    return [
        origin
        for allowed in allowed_hosts
        if "*" not in allowed and not allowed.startswith(".")
        for origin in [host_origin(scheme, allowed)]
        if origin is not None
    ]


def origin_allowed(scope: dict[str, Any]) -> bool:
    value = _header(scope.get("headers", []), b"origin")
    if value is None:
        return False
    origin = parse_origin(value)
    if origin is None:
        return False
    return origin in site_origins(scope) or any(origin_trusted(origin, pattern) for pattern in trusted_origins())


class SameOriginValidator:
    """ASGI middleware: a websocket from an origin that is not the site's is refused (closed
    before it is accepted, as channels' ``OriginValidator`` does)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator only guards websockets.")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier.as_asgi()(scope, receive, send)
