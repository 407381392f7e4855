from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import path, re_path

from chat.web.consumers import ChatConsumer


class NoSuchSocket(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels ships no type hints
    """Any other websocket path: refused with 4404 (no route would be an error page of the server's)."""

    async def connect(self) -> None:
        await self.close(code=4404)


websocket_urlpatterns = [
    path("ws/sessions/<uuid:session_id>/", ChatConsumer.as_asgi()),
    re_path(r"", NoSuchSocket.as_asgi()),
]
