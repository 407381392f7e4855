from __future__ import annotations

import importlib
from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


def ensure_sqlite_triggers(using: str = "default", **kwargs: Any) -> None:
    """Put back any search trigger a migration dropped on SQLite.

    SQLite cannot alter every column in place: Django then rebuilds the table
    (new table, copy, drop, rename), and the triggers of the old table go with
    it. Run after every ``migrate``; PostgreSQL alters tables in place and keeps them.
    """
    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search_fts'")
        if cursor.fetchone() is None:
            return
        migration = importlib.import_module("search.migrations.0002_fulltext_index")
        for statement in migration.sqlite_triggers():
            cursor.execute(statement)


class SearchConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "search"
    verbose_name = "Search"

    def ready(self) -> None:
        post_migrate.connect(ensure_sqlite_triggers, sender=self, dispatch_uid="search-sqlite-triggers")
