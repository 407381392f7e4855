"""The sessions' admin search, widened to the full text of every session's history: the search app
extends chat's session admin (chat.admin.sessions), which knows nothing of search."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from chat.admin.sessions import SessionAdmin
from chat.models import Session
from search.selectors import search_session_ids_all_users


class SearchableSessionAdmin(SessionAdmin):
    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Session], search_term: str
    ) -> tuple[QuerySet[Session], bool]:
        """Title, owner and model as before, or the full-text search of every session's history."""
        by_fields, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        if not search_term.strip():
            return by_fields, may_have_duplicates
        by_history = search_session_ids_all_users(query=search_term)
        return queryset.filter(Q(pk__in=by_fields.values("pk")) | Q(pk__in=by_history)), False


admin.site.unregister(Session)
admin.site.register(Session, SearchableSessionAdmin)
