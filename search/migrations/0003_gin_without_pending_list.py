"""PostgreSQL: the GIN index takes new documents at once instead of queueing them (``fastupdate = off``).

With ``fastupdate`` on (the default), new entries wait in a pending list of up
to ``gin_pending_list_limit`` (4 MB) that every search through the index reads
in full until autovacuum merges it: several milliseconds on every selective
query. A chat writes one message at a time, so paying at insert is cheaper.
Nothing to do on SQLite (FTS5 has no such list).
"""

from __future__ import annotations

from django.db import migrations


def _run(schema_editor: object, statements: list[str]) -> None:
    if schema_editor.connection.vendor != "postgresql":  # type: ignore[attr-defined]
        return
    for statement in statements:
        schema_editor.execute(statement, params=None)  # type: ignore[attr-defined]


def forward(apps: object, schema_editor: object) -> None:
    _run(
        schema_editor,
        [
            "ALTER INDEX search_document_fts SET (fastupdate = off)",
            # Turning it off keeps what is already queued: merge that now.
            "SELECT gin_clean_pending_list('search_document_fts'::regclass)",
        ],
    )


def backward(apps: object, schema_editor: object) -> None:
    _run(schema_editor, ["ALTER INDEX search_document_fts SET (fastupdate = on)"])


class Migration(migrations.Migration):
    dependencies = [("search", "0002_fulltext_index")]

    operations = [migrations.RunPython(forward, backward)]
