from __future__ import annotations

from ninja import Field, Schema
from ninja.pagination import LimitOffsetPagination

MAX_PAGE = 500
# Far past any real list, and small enough that no database overflows on it.
MAX_OFFSET = 10**9


class Pages(LimitOffsetPagination):
    """``?limit=&offset=`` pages of at most MAX_PAGE items: ``{items, count}``."""

    class Input(Schema):
        limit: int = Field(100, ge=1, le=MAX_PAGE)
        offset: int = Field(0, ge=0, le=MAX_OFFSET)
