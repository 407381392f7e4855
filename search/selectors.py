"""Search across a user's sessions: one selector, one results contract, either database engine.

``search_history`` ranks the matching documents (messages, checkpoints, goals,
decisions, artifacts) of the user's own sessions with the engine's full-text
index (FTS5's bm25 on SQLite, ``ts_rank`` on PostgreSQL), returns one page of
hits with a highlighted snippet each, and groups them by session.

At most ``MATCH_CAP`` matches are ranked and counted: the newest ones (the
highest document ids, i.e. the last written to the index). When more match,
the page says so (``total_is_capped``) instead of scoring and counting every
match, which costs time in proportion to the matches (a common word is in
nearly every message): the newest ``MATCH_CAP`` are found by walking the index
from the newest document and stopping there, on both engines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, Protocol
from uuid import UUID

from django.db import connection
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from chat.models import Message, Session
from chat.selectors.sessions import HISTORY_WINDOW
from engine.core.text import storable_text
from search.models import SearchDocument
from search.query import ParsedQuery, Term, fts5_query, parse_query, tsquery

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
# Beyond any real result list; keeps the offset inside the engines' integers.
MAX_PAGE = 1_000_000
SNIPPET_CHARS = 200
# The most matches ranked and counted (the newest); more are reported as "MATCH_CAP+".
MATCH_CAP = 1_000
# Best first, then newest: the order of the engines' ranking queries below.
RANKING_SQL = "ORDER BY score DESC, created_at DESC, id DESC"


@dataclass(frozen=True)
class SearchFilters:
    session: UUID | None = None
    model: str = ""
    since: date | None = None
    until: date | None = None
    role: str = ""
    kind: str = ""
    locked_only: bool = False


@dataclass(frozen=True)
class SearchHit:
    kind: str
    ref_id: int
    session_id: UUID
    session_title: str
    model: str
    role: str
    position: int | None
    locked: bool
    created_at: datetime
    score: float
    snippet: SafeString
    url: str


@dataclass(frozen=True)
class SessionGroup:
    session_id: UUID
    title: str
    model: str
    hits: list[SearchHit]


@dataclass(frozen=True)
class SearchPage:
    query: str
    hits: list[SearchHit]
    total: int
    page: int
    page_size: int
    groups: list[SessionGroup] = field(default_factory=list)
    # More than ``total`` documents match: only the newest ``total`` (MATCH_CAP) were ranked and counted.
    total_is_capped: bool = False

    @property
    def num_pages(self) -> int:
        return max((self.total + self.page_size - 1) // self.page_size, 1)

    @property
    def has_next(self) -> bool:
        return self.page < self.num_pages

    @property
    def has_previous(self) -> bool:
        return self.page > 1


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def _before_day_after(day: date | None) -> datetime | None:
    """The bound of an ``until`` filter: the start of the day after ``day``; None (no bound) when there
    is no filter, or when ``day`` is the last day a date can hold (9999-12-31), which has no day after."""
    return None if day is None or day == date.max else _day_start(day + timedelta(days=1))


def _filtered(documents: QuerySet[SearchDocument], filters: SearchFilters) -> QuerySet[SearchDocument]:
    if filters.session is not None:
        documents = documents.filter(session_id=filters.session)
    if filters.model:
        # Stored names went through storable_text; a NUL in the filter (PostgreSQL refuses it) matches none.
        documents = documents.filter(session__model=storable_text(filters.model))
    if filters.since is not None:
        documents = documents.filter(created_at__gte=_day_start(filters.since))
    if (until := _before_day_after(filters.until)) is not None:
        documents = documents.filter(created_at__lt=until)
    if filters.role:
        documents = documents.filter(kind=SearchDocument.Kind.MESSAGE, role=filters.role)
    if filters.kind:
        documents = documents.filter(kind=filters.kind)
    if filters.locked_only:
        documents = documents.filter(kind=SearchDocument.Kind.DECISION, locked=True)
    return documents


class _Matches(Protocol):
    def newest_ranked(self, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` newest matches (highest document ids) as (document id, score), ranked: best
        first, then newest. Only these are scored, whatever the number of matches."""
        ...

    def session_ids(self) -> list[UUID]: ...


class _PostgresMatches:
    """``body_tsv`` is a stored generated tsvector with a GIN index (migration 0002); ranked by ts_rank.

    The newest matches come from the primary key walked backwards when the query's words are common
    (it stops at ``limit``), from the GIN index when they are rare: the planner picks by its estimates.
    """

    def __init__(self, user: Any | None, parsed: ParsedQuery, filters: SearchFilters) -> None:
        # PostgreSQL's own classes, imported only when the search runs on PostgreSQL (docs/architecture.md).
        from django.contrib.postgres.search import SearchQuery, SearchVectorField

        documents = SearchDocument.objects.all() if user is None else SearchDocument.objects.filter(session__owner=user)
        self.vector = RawSQL('"search_searchdocument"."body_tsv"', [], output_field=SearchVectorField())
        self.tsquery = tsquery(parsed)
        ts_query = SearchQuery(self.tsquery, search_type="raw", config="simple")
        self.documents = _filtered(documents, filters).alias(vector=self.vector).filter(vector=ts_query)

    def newest_ranked(self, limit: int) -> list[tuple[int, float]]:
        newest = self.documents.annotate(tsv=self.vector).order_by("-id").values_list("id", "created_at", "tsv")
        sql, params = newest[:limit].query.sql_with_params()
        # Ranked outside the LIMIT, so ts_rank runs on these rows only whichever plan finds them.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, ts_rank(tsv, to_tsquery('simple'::regconfig, %s), 1) AS score "
                f"FROM ({sql}) AS newest {RANKING_SQL}",
                [self.tsquery, *params],
            )
            return [(int(pk), float(score)) for pk, score in cursor.fetchall()]

    def session_ids(self) -> list[UUID]:
        return sorted(set(self.documents.values_list("session_id", flat=True)))


class _SqliteMatches:
    """FTS5 drives the query (CROSS JOIN fixes the order), so its cost follows the matches, not the
    history; the filters are the same as ``_filtered``'s, written for this join."""

    def __init__(self, user: Any | None, parsed: ParsedQuery, filters: SearchFilters) -> None:
        conditions = ["search_fts MATCH %s"]
        params: list[Any] = [fts5_query(parsed)]

        def where(condition: str, *values: Any) -> None:
            conditions.append(condition)
            params.extend(values)

        if user is not None:
            where("s.owner_id = %s", user.pk)
        if filters.session is not None:
            where("d.session_id = %s", filters.session.hex)
        if filters.model:
            where("s.model = %s", storable_text(filters.model))
        if filters.since is not None:
            where("d.created_at >= %s", connection.ops.adapt_datetimefield_value(_day_start(filters.since)))
        if (until := _before_day_after(filters.until)) is not None:
            where("d.created_at < %s", connection.ops.adapt_datetimefield_value(until))
        if filters.role:
            where("d.kind = %s AND d.role = %s", SearchDocument.Kind.MESSAGE.value, filters.role)
        if filters.kind:
            where("d.kind = %s", filters.kind)
        if filters.locked_only:
            where("d.kind = %s AND d.locked", SearchDocument.Kind.DECISION.value)
        self.joined = (
            "FROM search_fts CROSS JOIN search_searchdocument AS d ON d.id = search_fts.rowid "
            "CROSS JOIN chat_session AS s ON s.id = d.session_id WHERE " + " AND ".join(conditions)
        )
        self.params = params

    def _rows(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def newest_ranked(self, limit: int) -> list[tuple[int, float]]:
        # FTS5 walks its index newest first (it serves ORDER BY rowid DESC) and stops at the LIMIT;
        # bm25() runs only on the rows the inner query returns.
        sql = (
            "SELECT id, score FROM "
            f"(SELECT d.id AS id, -bm25(search_fts) AS score, d.created_at AS created_at {self.joined} "
            f"ORDER BY search_fts.rowid DESC LIMIT %s) {RANKING_SQL}"
        )
        return [(int(pk), float(score)) for pk, score in self._rows(sql, [*self.params, limit])]

    def session_ids(self) -> list[UUID]:
        return sorted(
            UUID(value) for (value,) in self._rows(f"SELECT DISTINCT d.session_id {self.joined}", self.params)
        )


def _matches(*, user: Any | None, query: str, filters: SearchFilters) -> _Matches | None:
    parsed = parse_query(query)
    if parsed.empty:
        return None
    if connection.vendor == "postgresql":
        return _PostgresMatches(user, parsed, filters)
    return _SqliteMatches(user, parsed, filters)


def _term_pattern(term: Term) -> str:
    """A term as the index reads it: its tokens in order, apart only by what is no letter or digit,
    the last one a prefix when the term is."""
    body = r"[\W_]+".join(re.escape(token) for token in term.tokens)
    return body + (r"[^\W_]*" if term.prefix else r"(?![^\W_])")


def highlight(text: str, terms: Sequence[Term], width: int = SNIPPET_CHARS) -> SafeString:
    """A window of ``text`` around the first match, escaped, with the query's own terms in <mark>."""
    pattern: re.Pattern[str] | None = None
    if terms:
        longest_first = sorted(terms, key=lambda term: -sum(len(token) for token in term.tokens))
        alternatives = "|".join(_term_pattern(term) for term in longest_first)
        pattern = re.compile(r"(?<![^\W_])(?:" + alternatives + ")", re.IGNORECASE)
    first = pattern.search(text) if pattern else None
    start = 0
    if first is not None and first.start() > width // 3:
        start = first.start() - width // 3
        space = text.rfind(" ", start - 20, start)
        start = space + 1 if space > 0 else start
    end = min(start + width, len(text))
    if end < len(text):
        space = text.find(" ", end, end + 20)
        end = space if space > 0 else end
    window = text[start:end]
    parts: list[str] = ["…"] if start > 0 else []
    cursor = 0
    for match in pattern.finditer(window) if pattern else ():
        parts.append(escape(window[cursor : match.start()]))
        parts.append(f"<mark>{escape(match.group())}</mark>")
        cursor = match.end()
    parts.append(escape(window[cursor:]))
    if end < len(text):
        parts.append("…")
    # Every piece was escaped above; the only markup is our own <mark>.
    return mark_safe(" ".join("".join(parts).split()))


def _url(document: SearchDocument, last_positions: dict[UUID, int]) -> str:
    chat = reverse("chat:chat", args=[document.session_id])
    if document.kind == SearchDocument.Kind.MESSAGE:
        old = (document.position or 0) <= last_positions.get(document.session_id, 0) - HISTORY_WINDOW
        return f"{chat}?around={document.ref_id}#msg-{document.ref_id}" if old else f"{chat}#msg-{document.ref_id}"
    if document.kind == SearchDocument.Kind.CHECKPOINT:
        return reverse("context:timeline", args=[document.session_id]) + f"#checkpoint-{document.ref_id}"
    if document.kind == SearchDocument.Kind.GOAL:
        return f"{chat}#goal-{document.ref_id}"
    if document.kind == SearchDocument.Kind.DECISION:
        return f"{chat}#decision-{document.ref_id}"
    return f"{chat}#goals-panel"


def search_history(
    *,
    user: Any,
    query: str,
    filters: SearchFilters | None = None,
    page: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> SearchPage:
    """One page of the user's own matching documents, best first, grouped by session.

    Ranks the newest ``MATCH_CAP`` matches (``total_is_capped`` when more match); a page past the
    last is the last. Never raises on what the user typed: an empty or unusable query gives an empty page.
    """
    page_size = min(max(page_size, 1), MAX_PAGE_SIZE)
    page = min(max(page, 1), MAX_PAGE)
    matches = _matches(user=user, query=query, filters=filters or SearchFilters())
    if matches is None:
        return SearchPage(query=query, hits=[], total=0, page=1, page_size=page_size)
    # One more than the cap tells whether there are more; that one (the oldest) is not shown.
    ranked = matches.newest_ranked(MATCH_CAP + 1)
    capped = len(ranked) > MATCH_CAP
    if capped:
        oldest = min(pk for pk, _ in ranked)
        ranked = [(pk, score) for pk, score in ranked if pk != oldest]
    total = len(ranked)
    page = min(page, max((total + page_size - 1) // page_size, 1))
    scores = dict(ranked[(page - 1) * page_size : page * page_size])
    by_id = SearchDocument.objects.select_related("session").in_bulk(list(scores))
    rows = [by_id[pk] for pk in scores if pk in by_id]
    session_ids = {row.session_id for row in rows if row.kind == SearchDocument.Kind.MESSAGE}
    # The latest position of each session (one index probe each), to tell which messages the chat
    # page's latest window leaves out.
    latest = Message.objects.filter(session=OuterRef("pk")).order_by("-position").values("position")[:1]
    last_positions = dict(
        Session.objects.filter(pk__in=session_ids).annotate(last=Subquery(latest)).values_list("pk", "last")
    )
    terms = parse_query(query).terms
    hits = [
        SearchHit(
            kind=row.kind,
            ref_id=row.ref_id,
            session_id=row.session_id,
            session_title=row.session.title,
            model=row.session.model,
            role=row.role,
            position=row.position,
            locked=row.locked,
            created_at=row.created_at,
            score=scores[row.pk],
            snippet=highlight(row.body, terms),
            url=_url(row, last_positions),
        )
        for row in rows
    ]
    groups: dict[UUID, SessionGroup] = {}
    for hit in hits:
        if hit.session_id not in groups:
            groups[hit.session_id] = SessionGroup(hit.session_id, hit.session_title, hit.model, [])
        groups[hit.session_id].hits.append(hit)
    return SearchPage(
        query=query,
        hits=hits,
        total=total,
        page=page,
        page_size=page_size,
        groups=list(groups.values()),
        total_is_capped=capped,
    )


def search_session_ids(*, user: Any, query: str, filters: SearchFilters | None = None) -> list[UUID]:
    """Every session of the user's with at least one match (for exporting all of them)."""
    matches = _matches(user=user, query=query, filters=filters or SearchFilters())
    return [] if matches is None else matches.session_ids()


def search_session_ids_all_users(*, query: str, filters: SearchFilters | None = None) -> list[UUID]:
    """The same across every user's sessions: for the admin and the export command only."""
    matches = _matches(user=None, query=query, filters=filters or SearchFilters())
    return [] if matches is None else matches.session_ids()


def sessions_matching(*, user: Any | None, query: str, filters: SearchFilters | None = None) -> QuerySet[Session]:
    """Sessions to export: those with a match when there is a query, else those the filters select.

    ``user=None`` means every user's sessions (the export command); pages always pass the user.
    """
    filters = filters or SearchFilters()
    sessions = Session.objects.all() if user is None else Session.objects.filter(owner=user)
    if query.strip():
        matches = _matches(user=user, query=query, filters=filters)
        return sessions.filter(pk__in=[] if matches is None else matches.session_ids()).order_by("created_at")
    if filters.session is not None:
        sessions = sessions.filter(pk=filters.session)
    if filters.model:
        sessions = sessions.filter(model=filters.model)
    if filters.since is not None:
        sessions = sessions.filter(last_activity__gte=_day_start(filters.since))
    if (until := _before_day_after(filters.until)) is not None:
        sessions = sessions.filter(created_at__lt=until)
    return sessions.order_by("created_at")
