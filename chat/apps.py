from __future__ import annotations

from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat sessions"

    def ready(self) -> None:
        # Wired once the apps are loaded: the chat sockets hear of the account changes that end a login
        # (chat.signals); the open pages hear of the domain's events (chat.web.channel_events); the requests
        # for background work reach the one function that runs them (chat.tasks.task_dispatch).
        from chat import signals, tasks
        from chat.web import channel_events

        signals.connect()
        channel_events.connect()
        tasks.connect()
