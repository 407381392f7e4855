"""Admin review of sessions: searchable and filterable, with the history read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from chat.models import Message, Session
from contextmgr.admin import ReadOnlyInline
from contextmgr.core.reliability import ReliabilityLevel, reliability_level, score_percent
from contextmgr.models import Checkpoint, ContextEvent
from contextmgr.resources import context_profiles
from contextmgr.selectors import session_context_line
from search.selectors import search_session_ids_all_users


class MessageInline(ReadOnlyInline):
    model = Message
    readonly_fields = ("position", "role", "content", "tokens", "tokens_exact", "compressed_into", "created_at")
    fields = readonly_fields


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    readonly_fields = (
        "number",
        "level",
        "range_label",
        "original_tokens",
        "current_tokens",
        "merged_into",
        "created_at",
    )
    fields = readonly_fields


class ContextEventInline(ReadOnlyInline):
    model = ContextEvent
    readonly_fields = ("created_at", "type", "payload")
    fields = readonly_fields
    show_change_link = False


class TierFilter(admin.SimpleListFilter):
    title = "tier"
    parameter_name = "tier"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        tiers = {p.tier.number: p.tier.label for p in context_profiles()}
        return [(str(number), label) for number, label in sorted(tiers.items())]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> QuerySet[Session]:
        if self.value() is None:
            return queryset
        sizes = [p.size for p in context_profiles() if str(p.tier.number) == self.value()]
        return queryset.filter(context_size__in=sizes)


# Score bounds of each level, matching contextmgr.core.reliability.reliability_level.
LEVEL_BOUNDS = {
    ReliabilityLevel.HIGH: (0.845, 2.0),
    ReliabilityLevel.MEDIUM: (0.595, 0.845),
    ReliabilityLevel.LOW: (0.395, 0.595),
    ReliabilityLevel.CRITICAL: (-1.0, 0.395),
}


class ReliabilityFilter(admin.SimpleListFilter):
    title = "reliability"
    parameter_name = "reliability"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(level.name, f"{level.emoji} {level.label}") for level in ReliabilityLevel]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> QuerySet[Session]:
        if self.value() not in ReliabilityLevel.__members__:
            return queryset
        low, high = LEVEL_BOUNDS[ReliabilityLevel[str(self.value())]]
        return queryset.filter(reliability_score__gte=low, reliability_score__lt=high)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "title",
        "owner",
        "model",
        "tier_label",
        "context",
        "compression_count",
        "reliability",
        "last_activity",
    ]
    list_filter = ["model", TierFilter, ReliabilityFilter]
    search_fields = ["title", "owner__username", "model"]
    readonly_fields = [
        "id",
        "owner",
        "model_parameter_size_b",
        "max_tokens",
        "system_prompt_tokens",
        "compression_count",
        "reliability_score",
        "created_at",
        "last_activity",
        "context",
    ]
    fields = [
        "id",
        "owner",
        "title",
        "model",
        "model_parameter_size_b",
        "context_size",
        "max_tokens",
        "context",
        "system_prompt",
        "system_prompt_tokens",
        "settings",
        "compression_count",
        "reliability_score",
        "created_at",
        "last_activity",
    ]
    inlines = [CheckpointInline, MessageInline, ContextEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Sessions are started from the dashboard, which counts tokens and sets the budget.
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Session], search_term: str
    ) -> tuple[QuerySet[Session], bool]:
        """Title, owner and model as before, or the full-text search of every session's history."""
        by_fields, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        if not search_term.strip():
            return by_fields, may_have_duplicates
        by_history = search_session_ids_all_users(query=search_term)
        return queryset.filter(Q(pk__in=by_fields.values("pk")) | Q(pk__in=by_history)), False

    @admin.display(description="tier")
    def tier_label(self, obj: Session) -> str:
        return obj.profile.tier.label

    @admin.display(description="context")
    def context(self, obj: Session) -> str:
        return session_context_line(session=obj)

    @admin.display(description="reliability", ordering="reliability_score")
    def reliability(self, obj: Session) -> str:
        level = reliability_level(obj.reliability_score)
        return f"{level.emoji} {level.label} ({score_percent(obj.reliability_score)}%)"


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["session", "position", "role", "tokens", "compressed_into", "created_at"]
    list_filter = ["role"]
    search_fields = ["content", "session__title"]
    list_select_related = ["session", "compressed_into"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
