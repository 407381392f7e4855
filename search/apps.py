from __future__ import annotations

import importlib
from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.migrations.recorder import MigrationRecorder
from django.db.models.signals import post_migrate

# The migrations that define ``sqlite_triggers()``, newest first.
TRIGGER_MIGRATIONS = ("0004_message_date_follows_updates", "0002_fulltext_index")


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
        applied = MigrationRecorder(connection).applied_migrations()
        # The newest applied migration that writes triggers says what they are.
        name = next((n for n in TRIGGER_MIGRATIONS if ("search", n) in applied), TRIGGER_MIGRATIONS[-1])
        migration = importlib.import_module(f"search.migrations.{name}")
        for statement in migration.sqlite_triggers():
            cursor.execute(statement)


class SearchConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "search"
    verbose_name = "Search"

    def ready(self) -> None:
        post_migrate.connect(ensure_sqlite_triggers, sender=self, dispatch_uid="search-sqlite-triggers")
