from __future__ import annotations

from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat sessions"

    def ready(self) -> None:
        # The chat sockets hear of the account changes that end a login (chat.signals).
        from chat import signals

        signals.connect()
