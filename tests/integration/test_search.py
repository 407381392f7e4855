"""Search across sessions: the same cases on SQLite (FTS5) and PostgreSQL (tsvector + GIN)."""

from __future__ import annotations

import importlib
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from chat.models import Message
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.goals import artifact_record, decision_record, decision_update, goal_create
from chat.services.messages import message_create
from chat.services.sessions import session_create, session_delete
from search.models import SearchDocument
from search.selectors import SearchFilters, search_history, search_session_ids, sessions_matching

pytestmark = pytest.mark.django_db

HOSTILE = [
    '"',
    '"""',
    "'",
    "((((",
    "))) OR (((",
    'NEAR(login auth, 2) AND "',
    "login AND OR NOT",
    "* ^ : - + ~ | & ! <-> :*",
    "body:login",
    "-",
    "--login",
    "'; DROP TABLE chat_message; --",
    "login\x00auth",
    "\\",
    "a" * 10_000,
    "a." * 5_000,
    '"' + "word " * 2_000 + '"',
    ("login OR " * 2_000)[:10_240],
    '"unterminated phrase login',
    "日本語)(*&^%$#@!",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🧪🧪",
    "OR",
    "NOT login",
    "\u202e\u200b",
]


@pytest.fixture
def corpus(user, other_user):
    """Alice's two sessions and Bob's one, with every kind of searchable text."""
    auth = session_create(owner=user, model="llama3.2:3b", context_size=16384, title="Auth work")
    message_create(session=auth, role="user", content="Please fix the login bug in src/auth/login.ts")
    reply = message_create(
        session=auth,
        role="assistant",
        content="The authentication middleware rejected tokens; I changed src/auth/login.ts to refresh them.",
    )
    message_create(session=auth, role="user", content="Die Straße ist lang, das café ist klein. 日本語 のテキスト")
    message_create(
        session=auth, role="assistant", content='Never paste <script>alert("pwned")</script> into login forms'
    )
    compression_commit(
        session=auth,
        message_ids=[reply.id],
        draft=CheckpointDraft(summary="Fixed the middleware token refresh.", files_modified=("src/auth/session.ts",)),
    )
    goal_create(session=auth, description="Ship the quarterly report")
    locked = decision_record(session=auth, description="Use PostgreSQL in production", locked=True)
    loose = decision_record(session=auth, description="Maybe use Redis in production")
    artifact = artifact_record(session=auth, path="docs/quarterly-report.md", action="created")

    notes = session_create(owner=user, model="embedded/smollm2-135m", context_size=4096, title="Notes")
    message_create(session=notes, role="user", content="deploy")
    message_create(
        session=notes, role="assistant", content="deploy deploy deploy: the deploy script deploys on every push"
    )
    message_create(session=notes, role="user", content="A long aside that mentions deploy only once, among many words.")

    secret = session_create(owner=other_user, model="llama3.2:3b", context_size=16384, title="Bob's plans")
    message_create(session=secret, role="user", content="Bob's secret login plan for src/auth/login.ts and the café")
    decision_record(session=secret, description="Use PostgreSQL in production", locked=True)
    return {
        "auth": auth,
        "reply": reply,
        "notes": notes,
        "secret": secret,
        "locked": locked,
        "loose": loose,
        "artifact": artifact,
    }


def kinds_and_texts(page):
    return [(hit.kind, str(hit.snippet)) for hit in page.hits]


def test_the_engine_is_the_databases_own():
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'search_document_fts'")
            (indexdef,) = cursor.fetchone()
        assert "gin" in indexdef.lower()
        assert "(body_tsv)" in indexdef
        assert "fastupdate=off" in indexdef  # no pending list for every search to read (migration 0003)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT generation_expression FROM information_schema.columns"
                " WHERE table_name = 'search_searchdocument' AND column_name = 'body_tsv'"
            )
            (expression,) = cursor.fetchone()
        assert "to_tsvector('simple'" in expression
    else:
        with connection.cursor() as cursor:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'search_fts'")
            (sql,) = cursor.fetchone()
        assert "fts5" in sql.lower()


def test_every_kind_is_indexed_on_write(corpus):
    auth = corpus["auth"]
    kinds = set(SearchDocument.objects.filter(session=auth).values_list("kind", flat=True))
    assert kinds == {"message", "checkpoint", "goal", "decision", "artifact"}
    assert SearchDocument.objects.filter(session=auth, kind="message").count() == auth.messages.count() == 4


def test_a_phrase_matches_only_in_order(user, corpus):
    page = search_history(user=user, query='"to refresh them"')
    assert [hit.ref_id for hit in page.hits] == [corpus["reply"].id]
    assert search_history(user=user, query='"them refresh to"').total == 0


def test_words_match_as_prefixes_and_all_must_match(user, corpus):
    page = search_history(user=user, query="authent middle")
    assert [hit.ref_id for hit in page.hits] == [corpus["reply"].id]
    assert search_history(user=user, query="authent nowhere").total == 0
    # A quoted word is exact: no prefix.
    assert search_history(user=user, query='"authent"').total == 0


def test_or_and_exclusion(user, corpus):
    page = search_history(user=user, query="Redis OR PostgreSQL", filters=SearchFilters(kind="decision"))
    assert {hit.ref_id for hit in page.hits} == {corpus["locked"].id, corpus["loose"].id}
    page = search_history(user=user, query="production -Redis", filters=SearchFilters(kind="decision"))
    assert [hit.ref_id for hit in page.hits] == [corpus["locked"].id]


def test_code_identifiers_and_punctuation(user, corpus):
    auth = corpus["auth"]
    for query in ("src/auth/login.ts", "login.ts", "auth/login", "src/auth/log", "LOGIN.TS"):
        page = search_history(user=user, query=query, filters=SearchFilters(kind="message"))
        assert {hit.session_id for hit in page.hits} == {auth.id}, query
        assert len(page.hits) == 2, query
    # A path in a checkpoint's structured fields is searchable too.
    page = search_history(user=user, query="src/auth/session.ts")
    assert [hit.kind for hit in page.hits] == ["checkpoint"]
    assert search_history(user=user, query="src/session").total == 0


def test_non_english_text(user, corpus):
    for query in ("Straße", "straße", "Stra", "café", "CAFÉ", "日本語"):
        page = search_history(user=user, query=query)
        assert [hit.session_id for hit in page.hits] == [corpus["auth"].id], query
    page = search_history(user=user, query="straße")
    assert "<mark>Straße</mark>" in str(page.hits[0].snippet)
    # Documented limits, the same on both engines: accents count, and text without spaces
    # (Japanese) is one word, found by its beginning only.
    assert search_history(user=user, query="cafe").total == 0
    assert search_history(user=user, query="テキスト").total == 0


def test_compressed_messages_and_checkpoint_summaries_are_found(user, corpus):
    page = search_history(user=user, query="middleware")
    assert {hit.kind for hit in page.hits} == {"message", "checkpoint"}
    message = next(hit for hit in page.hits if hit.kind == "message")
    assert Message.objects.get(pk=message.ref_id).compressed_into is not None


def test_results_are_ranked_and_grouped_by_session(user, corpus):
    page = search_history(user=user, query="deploy")
    assert page.total == 3
    positions = [hit.position for hit in page.hits]
    # Many times in a short message ranks above once in a longer one.
    assert positions.index(2) < positions.index(3)
    assert page.hits[0].score >= page.hits[1].score >= page.hits[2].score > page.hits[2].score / 2 > 0
    assert [group.title for group in page.groups] == ["Notes"]
    page = search_history(user=user, query="production OR login OR deploy")
    assert {group.title for group in page.groups} == {"Notes", "Auth work"}
    assert sum(len(group.hits) for group in page.groups) == page.total


def test_snippets_escape_everything_but_the_marks(user, corpus):
    (hit,) = search_history(user=user, query="script pwned").hits
    snippet = str(hit.snippet)
    assert "<script>" not in snippet
    assert "&lt;<mark>script</mark>&gt;alert(&quot;<mark>pwned</mark>&quot;)&lt;/<mark>script</mark>&gt;" in snippet
    assert snippet.replace("<mark>", "").replace("</mark>", "").count("<") == 0


MARKED = re.compile(r"<mark>(.*?)</mark>")


@pytest.mark.parametrize(
    ("query", "marked"),
    [
        # A region's digit is no search of its own: the numbers around it stay unmarked.
        ("eu-west-1", ["eu-west-1"]),
        ("deploy eu-west-1", ["Deploy", "eu-west-1", "deployed"]),
        ('"retry 120"', ["retry 120"]),
        ("src/app/main.py -kubernetes", ["src/app/main.py"]),
        ("main.py OR pods", ["pods", "main.py"]),
    ],
)
def test_a_snippet_marks_only_the_querys_own_terms(user, chat_session, query, marked):
    message_create(
        session=chat_session,
        role="assistant",
        content="Deploy to eu-west-1 at 12:15 with retry 120 and 1 node, 15 pods; src/app/main.py deployed.",
    )
    (hit,) = search_history(user=user, query=query).hits
    assert MARKED.findall(str(hit.snippet)) == marked


def test_a_snippet_is_a_window_around_the_match(user, chat_session):
    message_create(session=chat_session, role="user", content="filler " * 200 + "needle here" + " tail" * 200)
    (hit,) = search_history(user=user, query="needle").hits
    snippet = str(hit.snippet)
    assert snippet.startswith("…")
    assert snippet.endswith("…")
    assert "<mark>needle</mark> here" in snippet
    assert len(snippet) < 320


def test_users_never_see_each_others_results(user, other_user, corpus):
    alice = search_history(user=user, query="login")
    assert alice.total == 3
    assert corpus["secret"].id not in {hit.session_id for hit in alice.hits}
    bob = search_history(user=other_user, query="login")
    assert {hit.session_id for hit in bob.hits} == {corpus["secret"].id}
    assert all("Bob" in str(hit.snippet) for hit in bob.hits)
    assert search_history(user=user, query="secret").total == 0
    assert search_history(user=user, query="login", filters=SearchFilters(session=corpus["secret"].id)).total == 0
    assert search_session_ids(user=user, query="PostgreSQL") == [corpus["auth"].id]
    assert list(sessions_matching(user=user, query="café")) == [corpus["auth"]]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_error(user, corpus, query):
    """Each query is read as its plain words: most of them find nothing of alice's, these find what
    their words find (``login``: her three messages with it; ``日本語``: the one in German and Japanese)."""
    finds = {("login OR " * 2_000)[:10_240]: 3, "日本語)(*&^%$#@!": 1}.get(query, 0)
    page = search_history(user=user, query=query)
    assert page.total == len(page.hits) == finds
    assert all(hit.session_id == corpus["auth"].id for hit in page.hits)
    assert search_session_ids(user=user, query=query) == ([corpus["auth"].id] if finds else [])


def test_hostile_queries_keep_their_words(user, corpus):
    assert search_history(user=user, query="login)))(((").total == 3
    assert search_history(user=user, query='"unterminated login').total == 0
    assert search_history(user=user, query='"login bug').total == 1
    assert search_history(user=user, query="body:quarterly").total == 0
    assert search_history(user=user, query="NOT login").total == 0  # both words are required, NOT is a word
    assert search_history(user=user, query="-login").total == 0  # nothing positive: nothing
    assert search_history(user=user, query="").total == 0


def test_filters(user, corpus):
    auth = corpus["auth"]
    by_role = search_history(user=user, query="login", filters=SearchFilters(role="user"))
    assert {(hit.kind, hit.role) for hit in by_role.hits} == {("message", "user")}
    assert by_role.total == 1
    by_model = search_history(user=user, query="deploy OR login", filters=SearchFilters(model="llama3.2:3b"))
    assert {hit.session_id for hit in by_model.hits} == {auth.id}
    assert search_history(user=user, query="deploy", filters=SearchFilters(session=corpus["notes"].id)).total == 3
    locked = search_history(user=user, query="production", filters=SearchFilters(locked_only=True))
    assert [(hit.ref_id, hit.locked) for hit in locked.hits] == [(corpus["locked"].id, True)]
    everything = search_history(user=user, query="quarterly")
    assert {hit.kind for hit in everything.hits} == {"goal", "artifact"}
    artifacts = search_history(user=user, query="quarterly", filters=SearchFilters(kind="artifact"))
    assert [hit.ref_id for hit in artifacts.hits] == [corpus["artifact"].id]
    today = timezone.localdate()
    assert search_history(user=user, query="login", filters=SearchFilters(since=today, until=today)).total == 3
    assert search_history(user=user, query="login", filters=SearchFilters(since=today + timedelta(days=1))).total == 0
    assert search_history(user=user, query="login", filters=SearchFilters(until=today - timedelta(days=1))).total == 0


def test_pagination(user, corpus):
    first = search_history(user=user, query="deploy", page_size=2)
    second = search_history(user=user, query="deploy", page=2, page_size=2)
    assert (first.total, first.num_pages, first.has_next, second.has_next) == (3, 2, True, False)
    assert len(first.hits) == 2
    assert len(second.hits) == 1
    assert {h.ref_id for h in first.hits}.isdisjoint(h.ref_id for h in second.hits)
    assert search_history(user=user, query="deploy", page=99, page_size=2).page == 2


def test_the_index_follows_edits_and_deletes(user, corpus):
    decision_update(decision=corpus["loose"], description="Maybe use Memcached in production")
    assert search_history(user=user, query="Redis").total == 0
    assert search_history(user=user, query="memcach").total == 1
    corpus["locked"].delete()
    assert search_history(user=user, query="PostgreSQL").total == 0
    session_delete(session=corpus["notes"])
    assert search_history(user=user, query="deploy").total == 0
    assert not SearchDocument.objects.filter(session_id=corpus["notes"].id).exists()


def test_message_links_open_the_message_even_outside_the_latest_window(user, chat_session):
    first = message_create(session=chat_session, role="user", content="the very first zebra")
    for i in range(300):
        message_create(session=chat_session, role="assistant", content=f"filler {i}")
    last = message_create(session=chat_session, role="user", content="the latest zebra")
    page = search_history(user=user, query="zebra")
    urls = {hit.ref_id: hit.url for hit in page.hits}
    assert urls[first.id] == f"/sessions/{chat_session.id}/?around={first.id}#msg-{first.id}"
    assert urls[last.id] == f"/sessions/{chat_session.id}/#msg-{last.id}"


def test_the_triggers_are_in_place_and_come_back_after_a_sqlite_table_rebuild(user, chat_session):
    from search.apps import ensure_sqlite_triggers

    tables = ["chat_message", "contextmgr_checkpoint", "contextmgr_goal", "contextmgr_decision", "contextmgr_artifact"]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # PostgreSQL alters tables in place: the triggers stay; nothing to put back.
            cursor.execute("SELECT DISTINCT tgrelid::regclass::text FROM pg_trigger WHERE tgname LIKE 'search_%%'")
            assert sorted(row[0] for row in cursor.fetchall()) == sorted(tables)
            ensure_sqlite_triggers()
            return
        cursor.execute("SELECT DISTINCT tbl_name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'search_%'")
        assert sorted(row[0] for row in cursor.fetchall()) == sorted([*tables, "search_searchdocument"])
        # What a table rebuild does to them.
        cursor.execute("DROP TRIGGER search_message_ai")
        cursor.execute("DROP TRIGGER search_message_au")
    message_create(session=chat_session, role="user", content="lost walrus")
    assert search_history(user=user, query="walrus").total == 0
    ensure_sqlite_triggers()
    found = message_create(session=chat_session, role="user", content="found walrus")
    assert search_history(user=user, query="walrus").total == 1
    # The update trigger put back is the one of migration 0004: it copies the date.
    Message.objects.filter(pk=found.pk).update(created_at=OLD)
    assert _document_date_and_position(found) == (OLD, found.position)


OLD = datetime(2020, 3, 14, 9, 0, tzinfo=UTC)


def _document_date_and_position(message):
    document = SearchDocument.objects.get(kind="message", ref_id=message.pk)
    return document.created_at, document.position


def test_the_index_follows_a_messages_date_and_position(user, chat_session):
    message = message_create(session=chat_session, role="user", content="an old marmot")
    other = message_create(session=chat_session, role="user", content="a new marmot")
    Message.objects.filter(pk=message.pk).update(created_at=OLD, position=1000)
    assert _document_date_and_position(message) == (OLD, 1000)
    assert _document_date_and_position(other) == (other.created_at, other.position)
    in_2020 = SearchFilters(since=OLD.date(), until=OLD.date())
    assert [hit.ref_id for hit in search_history(user=user, query="marmot", filters=in_2020).hits] == [message.pk]
    since_today = SearchFilters(since=timezone.localdate())
    assert [hit.ref_id for hit in search_history(user=user, query="marmot", filters=since_today).hits] == [other.pk]


class _Editor:
    """What the migration's functions use of a schema editor: the connection, and execute()."""

    def __init__(self):
        self.connection = connection

    def execute(self, sql, params=None):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


def test_migration_0004_corrects_stale_documents_and_is_reversible(user, chat_session):
    migration = importlib.import_module("search.migrations.0004_message_date_follows_updates")
    stale = message_create(session=chat_session, role="user", content="stale heron")
    fresh = message_create(session=chat_session, role="user", content="fresh heron")
    # What an import left behind before 0004: the message dated by the file, the document by the import.
    migration.backward(None, _Editor())
    Message.objects.filter(pk=stale.pk).update(created_at=OLD)
    assert _document_date_and_position(stale) == (stale.created_at, stale.position)
    migration.forward(None, _Editor())
    assert _document_date_and_position(stale) == (OLD, stale.position)
    assert _document_date_and_position(fresh) == (fresh.created_at, fresh.position)
    Message.objects.filter(pk=fresh.pk).update(created_at=OLD)
    assert _document_date_and_position(fresh) == (OLD, fresh.position)
    # Edits still reach the index through the recreated triggers.
    Message.objects.filter(pk=fresh.pk).update(content="renamed egret")
    assert search_history(user=user, query="egret").total == 1


def test_beyond_the_cap_only_the_newest_matches_are_ranked_and_counted(user, other_user, chat_session, monkeypatch):
    # The two oldest rank best (the word three times in a short message), but are the oldest.
    old = [message_create(session=chat_session, role="user", content="kiwi kiwi kiwi") for _ in range(2)]
    new = [
        message_create(session=chat_session, role="assistant", content=f"one kiwi among many other words, {i}")
        for i in range(3)
    ]
    # Another user's newer matches take none of the user's places.
    bobs = session_create(owner=other_user, model="llama3.2:3b", context_size=16384, title="Bob's")
    message_create(session=bobs, role="user", content="kiwi kiwi kiwi kiwi")

    monkeypatch.setattr("search.selectors.MATCH_CAP", 5)
    everything = search_history(user=user, query="kiwi")
    assert (everything.total, everything.total_is_capped) == (5, False)  # exactly the cap: all of them
    assert {hit.ref_id for hit in everything.hits[:2]} == {m.id for m in old}

    monkeypatch.setattr("search.selectors.MATCH_CAP", 3)
    capped = search_history(user=user, query="kiwi")
    assert (capped.total, capped.total_is_capped, capped.num_pages) == (3, True, 1)
    # The newest three, still ranked (equal scores: newest first); the better-scoring old ones are left out.
    assert [hit.ref_id for hit in capped.hits] == [m.id for m in reversed(new)]
    assert [group.title for group in capped.groups] == [chat_session.title]
    # The filters select before the cap: the user's own two "user" messages are all there is.
    by_role = search_history(user=user, query="kiwi", filters=SearchFilters(role="user"))
    assert (by_role.total, by_role.total_is_capped) == (2, False)
    assert {hit.ref_id for hit in by_role.hits} == {m.id for m in old}
    # Pages go through the capped matches; a page past them is the last.
    pages = [search_history(user=user, query="kiwi", page=n, page_size=2) for n in (1, 2, 9)]
    assert [(p.page, p.num_pages, p.total_is_capped, len(p.hits)) for p in pages] == [
        (1, 2, True, 2),
        (2, 2, True, 1),
        (2, 2, True, 1),
    ]
    assert {hit.ref_id for p in pages[:2] for hit in p.hits} == {m.id for m in new}
