"""The full-text index and the triggers that keep it current, one flavour per database engine.

SQLite: an FTS5 table over ``search_searchdocument.body`` (external content,
kept in step by triggers on the document table). PostgreSQL: a stored generated
column ``body_tsv`` = ``to_tsvector('simple', ...)`` of the body with ASCII
punctuation turned into spaces (so ``src/auth/login.ts`` is split into words as
FTS5 splits it), with a GIN index. The column is not a model field: only the
database writes it. On both,
triggers on the source tables write the documents, and existing rows are
indexed once here.
"""

from __future__ import annotations

from django.db import migrations

# ASCII punctuation, replaced by spaces before PostgreSQL's parser sees the text
# (it would otherwise keep "src/auth/login.ts" as one "file" token).
PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
PG_VECTOR = "to_tsvector('simple'::regconfig, translate(body, {punct}, {spaces}))".format(
    punct="'" + PUNCTUATION.replace("'", "''") + "'", spaces="'" + " " * len(PUNCTUATION) + "'"
)

DOC_COLUMNS = "kind, ref_id, session_id, role, position, locked, created_at, body"


def _json_words(vendor: str, column: str) -> str:
    if vendor == "sqlite":
        return (
            f"coalesce((SELECT group_concat(value, ' ') FROM json_each({column}) "
            f"WHERE json_type({column}) = 'array'), '')"
        )
    return (
        f"coalesce((SELECT string_agg(value, ' ') FROM jsonb_array_elements_text("
        f"CASE WHEN jsonb_typeof({column}) = 'array' THEN {column} ELSE '[]'::jsonb END)), '')"
    )


def sources(vendor: str) -> list[dict[str, object]]:
    """What each source table contributes; ``{n}`` is the row (new., NEW. or a table alias)."""
    false = "0" if vendor == "sqlite" else "false"
    checkpoint_body = " || ' ' || ".join(
        ["{n}.summary"] + [_json_words(vendor, "{n}." + f) for f in ("key_decisions", "files_modified", "next_steps")]
    )
    return [
        {"kind": "message", "table": "chat_message", "body": "{n}.content", "role": "{n}.role",
         "position": "{n}.position", "locked": false, "watch": ["content", "role"]},
        {"kind": "checkpoint", "table": "contextmgr_checkpoint", "body": checkpoint_body, "role": "''",
         "position": "NULL", "locked": false, "watch": ["summary", "key_decisions", "files_modified", "next_steps"]},
        {"kind": "goal", "table": "contextmgr_goal", "body": "{n}.description || ' ' || {n}.next_step", "role": "''",
         "position": "NULL", "locked": false, "watch": ["description", "next_step"]},
        {"kind": "decision", "table": "contextmgr_decision", "body": "{n}.description", "role": "''",
         "position": "NULL", "locked": "{n}.locked", "watch": ["description", "locked"]},
        {"kind": "artifact", "table": "contextmgr_artifact", "body": "{n}.path", "role": "''",
         "position": "NULL", "locked": false, "watch": ["path"]},
    ]


def _values(source: dict[str, object], n: str) -> str:
    parts = [f"'{source['kind']}'", f"{n}.id", f"{n}.session_id", str(source["role"]), str(source["position"]),
             str(source["locked"]), f"{n}.created_at", str(source["body"])]
    return ", ".join(part.replace("{n}", n) for part in parts)


def _set(source: dict[str, object], n: str) -> str:
    """What an update of the source row copies: ``copy`` (0004 adds the message's date), else body, role, locked."""
    columns = list(source.get("copy", ("body", "role", "locked")))  # type: ignore[call-overload]
    return ", ".join(f"{column} = {str(source.get(column, '{n}.' + column)).replace('{n}', n)}" for column in columns)


def sqlite_source_triggers(s: dict[str, object]) -> list[str]:
    """The insert, update and delete triggers of one source table."""
    kind, table, watch = s["kind"], s["table"], list(s["watch"])  # type: ignore[call-overload]
    changed = " OR ".join(f"old.{c} IS NOT new.{c}" for c in watch)
    return [
        f"CREATE TRIGGER IF NOT EXISTS search_{kind}_ai AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO search_searchdocument ({DOC_COLUMNS}) VALUES ({_values(s, 'new')}); END",
        f"CREATE TRIGGER IF NOT EXISTS search_{kind}_au AFTER UPDATE OF {', '.join(watch)} ON {table} "
        f"WHEN {changed} BEGIN "
        f"UPDATE search_searchdocument SET {_set(s, 'new')} WHERE kind = '{kind}' AND ref_id = new.id; END",
        f"CREATE TRIGGER IF NOT EXISTS search_{kind}_ad AFTER DELETE ON {table} BEGIN "
        f"DELETE FROM search_searchdocument WHERE kind = '{kind}' AND ref_id = old.id; END",
    ]


def sqlite_triggers(source_list: list[dict[str, object]] | None = None) -> list[str]:
    """Every trigger; IF NOT EXISTS, so ``search.apps`` can put back any that a table rebuild dropped."""
    statements = [
        "CREATE TRIGGER IF NOT EXISTS search_fts_ai AFTER INSERT ON search_searchdocument BEGIN "
        "INSERT INTO search_fts(rowid, body) VALUES (new.id, new.body); END",
        "CREATE TRIGGER IF NOT EXISTS search_fts_ad AFTER DELETE ON search_searchdocument BEGIN "
        "INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.id, old.body); END",
        "CREATE TRIGGER IF NOT EXISTS search_fts_au AFTER UPDATE OF body ON search_searchdocument "
        "WHEN old.body IS NOT new.body BEGIN "
        "INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.id, old.body); "
        "INSERT INTO search_fts(rowid, body) VALUES (new.id, new.body); END",
    ]
    for s in sources("sqlite") if source_list is None else source_list:
        statements += sqlite_source_triggers(s)
    return statements


def sqlite_forward() -> list[str]:
    statements = [
        "CREATE VIRTUAL TABLE search_fts USING fts5(body, content='search_searchdocument', content_rowid='id', "
        "tokenize='unicode61 remove_diacritics 0')",
        *sqlite_triggers(),
    ]
    for s in sources("sqlite"):
        statements.append(f"INSERT INTO search_searchdocument ({DOC_COLUMNS}) SELECT {_values(s, 't')} FROM {s['table']} t")
    return statements


def sqlite_backward() -> list[str]:
    statements = ["DROP TABLE IF EXISTS search_fts"]
    statements += [f"DROP TRIGGER IF EXISTS search_fts_{op}" for op in ("ai", "ad", "au")]
    for s in sources("sqlite"):
        statements += [f"DROP TRIGGER IF EXISTS search_{s['kind']}_{op}" for op in ("ai", "au", "ad")]
    return statements + ["DELETE FROM search_searchdocument"]


def postgresql_forward() -> list[str]:
    statements = [
        # Stored, so ranking reads it instead of parsing every matching body again.
        f"ALTER TABLE search_searchdocument ADD COLUMN body_tsv tsvector GENERATED ALWAYS AS ({PG_VECTOR}) STORED",
        "CREATE INDEX search_document_fts ON search_searchdocument USING gin (body_tsv)",
    ]
    for s in sources("postgresql"):
        statements += [
            *postgresql_source_sync(s),
            f"INSERT INTO search_searchdocument ({DOC_COLUMNS}) SELECT {_values(s, 't')} FROM {s['table']} t",
        ]
    return statements


def postgresql_source_sync(s: dict[str, object]) -> list[str]:
    """The function and the trigger that keep one source table's documents; CREATE OR REPLACE the function."""
    kind, table, watch = s["kind"], s["table"], list(s["watch"])  # type: ignore[call-overload]
    changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in watch)
    return [
        f"""CREATE OR REPLACE FUNCTION search_{kind}_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    DELETE FROM search_searchdocument WHERE kind = '{kind}' AND ref_id = OLD.id;
    RETURN OLD;
  ELSIF TG_OP = 'INSERT' THEN
    INSERT INTO search_searchdocument ({DOC_COLUMNS}) VALUES ({_values(s, 'NEW')});
  ELSIF {changed} THEN
    UPDATE search_searchdocument SET {_set(s, 'NEW')} WHERE kind = '{kind}' AND ref_id = NEW.id;
  END IF;
  RETURN NEW;
END $$""",
        f"CREATE TRIGGER search_{kind}_sync AFTER INSERT OR DELETE OR UPDATE OF {', '.join(watch)} ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION search_{kind}_sync()",
    ]


def postgresql_backward() -> list[str]:
    statements = ["DROP INDEX IF EXISTS search_document_fts", "ALTER TABLE search_searchdocument DROP COLUMN body_tsv"]
    for s in sources("postgresql"):
        statements += [
            f"DROP TRIGGER IF EXISTS search_{s['kind']}_sync ON {s['table']}",
            f"DROP FUNCTION IF EXISTS search_{s['kind']}_sync()",
        ]
    return statements + ["DELETE FROM search_searchdocument"]


def _run(schema_editor: object, statements: list[str]) -> None:
    for statement in statements:
        schema_editor.execute(statement, params=None)  # type: ignore[attr-defined]


def forward(apps: object, schema_editor: object) -> None:
    vendor = schema_editor.connection.vendor  # type: ignore[attr-defined]
    if vendor == "sqlite":
        _run(schema_editor, sqlite_forward())
    elif vendor == "postgresql":
        _run(schema_editor, postgresql_forward())
    else:
        raise RuntimeError(f"search: no full-text index for the {vendor} database engine")


def backward(apps: object, schema_editor: object) -> None:
    vendor = schema_editor.connection.vendor  # type: ignore[attr-defined]
    _run(schema_editor, sqlite_backward() if vendor == "sqlite" else postgresql_backward())


class Migration(migrations.Migration):
    dependencies = [
        ("search", "0001_initial"),
        ("chat", "0006_compressed_through"),
        ("contextmgr", "0003_measured_retention"),
    ]

    operations = [migrations.RunPython(forward, backward)]
