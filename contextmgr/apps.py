"""The migration history of the context engine's models, which now live in chat (chat/models):
databases made before the move have contextmgr's migrations applied, and chat's migrations that
took the models over depend on them. The app holds nothing else."""

from __future__ import annotations

from django.apps import AppConfig


class ContextmgrConfig(AppConfig):
    name = "contextmgr"
    verbose_name = "Context manager (migration history)"
