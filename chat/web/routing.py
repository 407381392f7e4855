from __future__ import annotations

from django.urls import path

from chat.web.consumers import ChatConsumer

websocket_urlpatterns = [path("ws/sessions/<uuid:session_id>/", ChatConsumer.as_asgi())]
