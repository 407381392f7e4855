"""``GET /api/search``: the search selector over the REST API (django-ninja).

Mounted on the project's API at ``/api/search`` (ollm_site/api.py).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal
from uuid import UUID

from django.http import HttpRequest
from ninja import Query, Router, Schema
from pydantic import Field

from accounts.auth import api_user
from search.selectors import DEFAULT_PAGE_SIZE, MATCH_CAP, MAX_PAGE, MAX_PAGE_SIZE, SearchFilters, search_history

# Authentication is the API's own (a token, or the session cookie with CSRF).
router = Router(tags=["search"])


class SearchParams(Schema):
    q: str = Field("", description='Words, "phrases", -excluded, a OR b; never an error.')
    session: UUID | None = None
    model: str = ""
    since: date | None = None
    until: date | None = None
    role: Literal["", "user", "assistant", "system", "tool"] = ""
    kind: Literal["", "message", "checkpoint", "goal", "decision", "artifact"] = ""
    locked: bool = Field(False, description="Only locked decisions.")
    page: int = Field(1, ge=1, le=MAX_PAGE)
    page_size: int = Field(DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)


class SearchHitOut(Schema):
    kind: str
    id: int
    session: UUID
    session_title: str
    model: str
    role: str
    position: int | None
    locked: bool
    created_at: datetime
    score: float
    snippet: str = Field(description="HTML: everything escaped except the <mark> around matching words.")
    url: str


class SearchResultsOut(Schema):
    query: str
    total: int = Field(description=f"Matches ranked and counted: at most {MATCH_CAP:,}, the newest.")
    total_is_capped: bool = Field(
        description=f"More than {MATCH_CAP:,} documents match: only the newest {MATCH_CAP:,} were ranked and counted."
    )
    page: int
    page_size: int
    num_pages: int
    results: list[SearchHitOut]


@router.get("", response=SearchResultsOut, summary="Search the full history of your sessions")
def search(request: HttpRequest, params: Query[SearchParams]) -> SearchResultsOut:
    """Every message (compressed or not), checkpoint, goal, decision and artifact of your sessions,
    best matches first; each snippet marks the matching words."""
    page = search_history(
        user=api_user(request),
        query=params.q,
        filters=SearchFilters(
            session=params.session,
            model=params.model,
            since=params.since,
            until=params.until,
            role=params.role,
            kind=params.kind,
            locked_only=params.locked,
        ),
        page=params.page,
        page_size=params.page_size,
    )
    return SearchResultsOut(
        query=page.query,
        total=page.total,
        total_is_capped=page.total_is_capped,
        page=page.page,
        page_size=page.page_size,
        num_pages=page.num_pages,
        results=[
            SearchHitOut(
                kind=hit.kind,
                id=hit.ref_id,
                session=hit.session_id,
                session_title=hit.session_title,
                model=hit.model,
                role=hit.role,
                position=hit.position,
                locked=hit.locked,
                created_at=hit.created_at,
                score=hit.score,
                snippet=str(hit.snippet),
                url=hit.url,
            )
            for hit in page.hits
        ],
    )
