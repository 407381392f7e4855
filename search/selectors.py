"""Search across a user's sessions: one selector, one results contract, either database engine.

``search_history`` ranks the matching documents (messages, checkpoints, goals,
decisions, artifacts) of the user's own sessions with the engine's full-text
index (FTS5's bm25 on SQLite, ``ts_rank`` on PostgreSQL), returns one page of
hits with a highlighted snippet each, and groups them by session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Max, QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from chat.models import Message, Session
from chat.selectors import HISTORY_WINDOW
from search.models import SearchDocument
from search.query import ParsedQuery, fts5_query, parse_query, tsquery

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
SNIPPET_CHARS = 200
# Best first (the engines' scores are annotated as "score"), then newest.
RANKING: list[str] = ["-score", "-created_at", "-id"]

# The expression of the GIN index of migration 0002 (the planner matches it by expression).
PG_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
PG_VECTOR = 'to_tsvector(\'simple\'::regconfig, translate("search_searchdocument"."body", {}, {}))'.format(
    # "%" doubled: the expression goes through the driver's parameter formatting.
    "'" + PG_PUNCTUATION.replace("'", "''").replace("%", "%%") + "'",
    "'" + " " * len(PG_PUNCTUATION) + "'",
)


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


def _filtered(documents: QuerySet[SearchDocument], filters: SearchFilters) -> QuerySet[SearchDocument]:
    if filters.session is not None:
        documents = documents.filter(session_id=filters.session)
    if filters.model:
        documents = documents.filter(session__model=filters.model)
    if filters.since is not None:
        documents = documents.filter(created_at__gte=_day_start(filters.since))
    if filters.until is not None:
        documents = documents.filter(created_at__lt=_day_start(filters.until + timedelta(days=1)))
    if filters.role:
        documents = documents.filter(kind=SearchDocument.Kind.MESSAGE, role=filters.role)
    if filters.kind:
        documents = documents.filter(kind=filters.kind)
    if filters.locked_only:
        documents = documents.filter(kind=SearchDocument.Kind.DECISION, locked=True)
    return documents


def _matching(documents: QuerySet[SearchDocument], parsed: ParsedQuery) -> QuerySet[SearchDocument]:
    """The documents that match, annotated with ``score`` (higher is better)."""
    if connection.vendor == "postgresql":
        from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVectorField
        from django.db.models.expressions import RawSQL

        vector = RawSQL(PG_VECTOR, [], output_field=SearchVectorField())
        ts_query = SearchQuery(tsquery(parsed), search_type="raw", config="simple")
        return (
            documents.alias(vector=vector)
            .filter(vector=ts_query)
            .annotate(score=SearchRank(vector, ts_query, normalization=1))
        )
    return documents.extra(
        tables=["search_fts"],
        where=["search_fts.rowid = search_searchdocument.id", "search_fts MATCH %s"],
        params=[fts5_query(parsed)],
        select={"score": "-bm25(search_fts)"},
    )


def _documents(*, user: Any | None, query: str, filters: SearchFilters) -> QuerySet[SearchDocument] | None:
    parsed = parse_query(query)
    if parsed.empty:
        return None
    documents = SearchDocument.objects.all()
    if user is not None:
        documents = documents.filter(session__owner=user)
    return _matching(_filtered(documents, filters), parsed)


def highlight(text: str, words: tuple[tuple[str, bool], ...], width: int = SNIPPET_CHARS) -> SafeString:
    """A window of ``text`` around the first match, escaped, with the matching words in <mark>."""
    if words:
        alternatives = "|".join(
            re.escape(word) + (r"[^\W_]*" if prefix else r"(?![^\W_])")
            for word, prefix in sorted(words, key=lambda w: -len(w[0]))
        )
        pattern: re.Pattern[str] | None = re.compile(r"(?<![^\W_])(?:" + alternatives + ")", re.IGNORECASE)
    else:
        pattern = None
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
        return reverse("contextmgr:timeline", args=[document.session_id]) + f"#checkpoint-{document.ref_id}"
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

    Never raises on what the user typed: an empty or unusable query gives an empty page.
    """
    page_size = min(max(page_size, 1), MAX_PAGE_SIZE)
    page = max(page, 1)
    documents = _documents(user=user, query=query, filters=filters or SearchFilters())
    if documents is None:
        return SearchPage(query=query, hits=[], total=0, page=1, page_size=page_size)
    total = documents.count()
    page = min(page, max((total + page_size - 1) // page_size, 1))
    rows = list(documents.select_related("session").order_by(*RANKING)[(page - 1) * page_size : page * page_size])
    session_ids = {row.session_id for row in rows if row.kind == SearchDocument.Kind.MESSAGE}
    last_positions = dict(
        Message.objects.filter(session_id__in=session_ids)
        .values("session_id")
        .annotate(last=Max("position"))
        .values_list("session_id", "last")
    )
    words = parse_query(query).words
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
            score=float(row.score),  # type: ignore[attr-defined]
            snippet=highlight(row.body, words),
            url=_url(row, last_positions),
        )
        for row in rows
    ]
    groups: dict[UUID, SessionGroup] = {}
    for hit in hits:
        if hit.session_id not in groups:
            groups[hit.session_id] = SessionGroup(hit.session_id, hit.session_title, hit.model, [])
        groups[hit.session_id].hits.append(hit)
    return SearchPage(query=query, hits=hits, total=total, page=page, page_size=page_size, groups=list(groups.values()))


def search_session_ids(*, user: Any, query: str, filters: SearchFilters | None = None) -> list[UUID]:
    """Every session of the user's with at least one match (for exporting all of them)."""
    documents = _documents(user=user, query=query, filters=filters or SearchFilters())
    return [] if documents is None else sorted(set(documents.values_list("session_id", flat=True)))


def search_session_ids_all_users(*, query: str, filters: SearchFilters | None = None) -> list[UUID]:
    """The same across every user's sessions: for the admin and the export command only."""
    documents = _documents(user=None, query=query, filters=filters or SearchFilters())
    return [] if documents is None else sorted(set(documents.values_list("session_id", flat=True)))


def sessions_matching(*, user: Any | None, query: str, filters: SearchFilters | None = None) -> QuerySet[Session]:
    """Sessions to export: those with a match when there is a query, else those the filters select.

    ``user=None`` means every user's sessions (the export command); pages always pass the user.
    """
    filters = filters or SearchFilters()
    sessions = Session.objects.all() if user is None else Session.objects.filter(owner=user)
    if query.strip():
        documents = _documents(user=user, query=query, filters=filters)
        ids = [] if documents is None else documents.values_list("session_id", flat=True)
        return sessions.filter(pk__in=list(set(ids))).order_by("created_at")
    if filters.session is not None:
        sessions = sessions.filter(pk=filters.session)
    if filters.model:
        sessions = sessions.filter(model=filters.model)
    if filters.since is not None:
        sessions = sessions.filter(last_activity__gte=_day_start(filters.since))
    if filters.until is not None:
        sessions = sessions.filter(created_at__lt=_day_start(filters.until + timedelta(days=1)))
    return sessions.order_by("created_at")
