"""A message's search document follows updates of its date and position, not only of its text and role.

The message triggers of 0002 fire on an update of ``content`` or ``role`` and
copy body, role and locked only. A session import creates the messages (dated
now, ``auto_now_add``) and then sets ``created_at`` to the file's times in a
second statement, so the index kept the day of the import and the ``since`` /
``until`` filters took an old conversation for a new one. The triggers now also
watch ``created_at`` and ``position`` and copy both; the documents that differ
from their message already are put right here. On SQLite only the update
trigger changes (insert and delete are as they were); on PostgreSQL one
function serves all three, so it is replaced and its trigger made again.
``search.apps`` puts back the triggers of this migration once it is applied.
"""

from __future__ import annotations

import importlib

from django.db import migrations

fulltext = importlib.import_module("search.migrations.0002_fulltext_index")

DATED = ("created_at", "position")


def message_source(vendor: str, *, dated: bool = True) -> dict[str, object]:
    """0002's message source; ``dated``: an update of the date or the position is copied too."""
    source = next(s for s in fulltext.sources(vendor) if s["kind"] == "message")
    if not dated:
        return source
    return {**source, "watch": [*source["watch"], *DATED], "copy": ("body", "role", "locked", *DATED)}


def sources(vendor: str) -> list[dict[str, object]]:
    """0002's sources with the dated message source."""
    return [message_source(vendor) if s["kind"] == "message" else s for s in fulltext.sources(vendor)]


def sqlite_triggers() -> list[str]:
    """Every trigger as of this migration, for ``search.apps``."""
    return fulltext.sqlite_triggers(sources("sqlite"))


def _message_triggers(vendor: str, *, dated: bool) -> list[str]:
    source = message_source(vendor, dated=dated)
    if vendor == "sqlite":
        # IF NOT EXISTS: insert and delete stay; the update trigger was dropped just before.
        return ["DROP TRIGGER IF EXISTS search_message_au", *fulltext.sqlite_source_triggers(source)]
    return ["DROP TRIGGER IF EXISTS search_message_sync ON chat_message", *fulltext.postgresql_source_sync(source)]


def correction(vendor: str) -> str:
    """Copy the date and the position of every message whose document has others."""
    differs = "IS NOT" if vendor == "sqlite" else "IS DISTINCT FROM"
    message = "FROM chat_message m WHERE m.id = search_searchdocument.ref_id"
    copies = ", ".join(f"{column} = (SELECT m.{column} {message})" for column in DATED)
    stale = " OR ".join(f"m.{column} {differs} search_searchdocument.{column}" for column in DATED)
    return (
        f"UPDATE search_searchdocument SET {copies} "
        f"WHERE kind = 'message' AND EXISTS (SELECT 1 {message} AND ({stale}))"
    )


def forward(apps: object, schema_editor: object) -> None:
    vendor = schema_editor.connection.vendor  # type: ignore[attr-defined]
    fulltext._run(schema_editor, [*_message_triggers(vendor, dated=True), correction(vendor)])


def backward(apps: object, schema_editor: object) -> None:
    # The documents keep the corrected dates: they are the messages' own.
    vendor = schema_editor.connection.vendor  # type: ignore[attr-defined]
    fulltext._run(schema_editor, _message_triggers(vendor, dated=False))


class Migration(migrations.Migration):
    dependencies = [("search", "0003_gin_without_pending_list")]

    operations = [migrations.RunPython(forward, backward)]
