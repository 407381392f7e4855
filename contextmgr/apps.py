from __future__ import annotations

from django.apps import AppConfig


class ContextmgrConfig(AppConfig):
    name = "contextmgr"
    verbose_name = "Context manager"
