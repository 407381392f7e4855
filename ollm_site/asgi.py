"""ASGI entry point: HTTP through Django, websockets through Channels.

Websockets need a logged-in user (the session cookie) and the site's own Origin
(scheme, host and port: ollm_site/origins.py), so another site cannot open a socket
with the user's cookie.
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ollm_site.settings")
# django.core.asgi.get_asgi_application, with the handler that keeps the middleware chain synchronous.
django.setup(set_prefix=False)

from ollm_site.middleware import SyncChainASGIHandler  # noqa: E402  (needs Django set up first)

django_asgi_app = SyncChainASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chat.web.routing import websocket_urlpatterns  # noqa: E402
from ollm_site.origins import SameOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
