"""Admin review of sessions: searchable and filterable, with the history read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest

from chat.admin.context import EventColumns, ReadOnlyInline
from chat.models import Checkpoint, ClientTask, ContextEvent, Decision, Goal, Message, Session, Snapshot
from chat.selectors.context import session_budget, sessions_budget
from chat.templatetags import chat_extras
from engine.core.budget import Budget
from engine.core.reliability import ReliabilityLevel, reliability_level, score_percent
from engine.resources import context_profiles


class MessageColumns:
    """Where a message stands, in the words of the full history page."""

    @admin.display(description="context")
    def context_state(self, message: Message) -> str:
        return chat_extras.context_state(message)


class MessageInline(MessageColumns, ReadOnlyInline):
    model = Message
    readonly_fields = ("position", "role", "content", "tokens", "tokens_exact", "context_state", "created_at")
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("compressed_into")


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


class GoalInline(ReadOnlyInline):
    model = Goal
    readonly_fields = ("description", "priority", "status", "next_step", "updated_at")
    fields = readonly_fields


class SessionDecisionInline(ReadOnlyInline):
    model = Decision
    readonly_fields = ("description", "goal", "locked", "updated_at")
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Decision]:
        return super().get_queryset(request).select_related("goal")


class SnapshotInline(ReadOnlyInline):
    model = Snapshot
    readonly_fields = ("created_at", "kind", "reason", "token_count", "message_count", "checkpoint_count", "model")
    fields = readonly_fields


class ContextEventInline(EventColumns, ReadOnlyInline):
    model = ContextEvent
    readonly_fields = ("created_at", "type", "what_happened")
    fields = readonly_fields


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


# Score bounds of each level, matching engine.core.reliability.reliability_level.
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
        return [(level.name, level.label) for level in ReliabilityLevel]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> QuerySet[Session]:
        if self.value() not in ReliabilityLevel.__members__:
            return queryset
        low, high = LEVEL_BOUNDS[ReliabilityLevel[str(self.value())]]
        return queryset.filter(reliability_score__gte=low, reliability_score__lt=high)


class SessionChangeList(ChangeList):
    """The page's budgets read together: a budget a row would cost several queries on a 100-row page."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        budgets = sessions_budget(sessions=list(self.result_list))
        for session in self.result_list:
            session.listed_budget = budgets[session.pk]


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
    list_select_related = ["owner"]
    search_fields = ["title", "owner__username", "model", "client"]
    readonly_fields = [
        "id",
        "client",
        "owner",
        "model_parameter_size_b",
        "max_tokens",
        "system_prompt_tokens",
        "compression_count",
        "reliability",
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
        "client",
        "context_size",
        "max_tokens",
        "context",
        "system_prompt",
        "system_prompt_tokens",
        "settings",
        "compression_count",
        "reliability",
        "created_at",
        "last_activity",
    ]
    # All read-only: goals and decisions change through their services, which move the pinned
    # block's version with every edit, and a snapshot never changes once taken.
    inlines = [GoalInline, SessionDecisionInline, CheckpointInline, SnapshotInline, MessageInline, ContextEventInline]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return SessionChangeList

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Sessions are started from the dashboard, which counts tokens and sets the budget.
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="tier")
    def tier_label(self, obj: Session) -> str:
        return obj.profile.tier.label

    @admin.display(description="context")
    def context(self, obj: Session) -> str:
        budget: Budget = getattr(obj, "listed_budget", None) or session_budget(session=obj)
        return f"{budget.used:,} / {budget.max_tokens:,} tokens"

    @admin.display(description="reliability", ordering="reliability_score")
    def reliability(self, obj: Session) -> str:
        level = reliability_level(obj.reliability_score)
        # Words, not the spec's coloured emoji: they render as empty boxes without an emoji font.
        return f"{level.label} ({score_percent(obj.reliability_score)}%)"


class ContextStateFilter(admin.SimpleListFilter):
    title = "context"
    parameter_name = "context"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("active", "in the context"),
            ("compressed", "compressed into a checkpoint"),
            ("history", "history only"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        # The same precedence as the wording: a message in a checkpoint reads as compressed.
        if self.value() == "active":
            return queryset.filter(compressed_into__isnull=True, excluded_from_context=False)
        if self.value() == "compressed":
            return queryset.filter(compressed_into__isnull=False)
        if self.value() == "history":
            return queryset.filter(compressed_into__isnull=True, excluded_from_context=True)
        return queryset


@admin.register(Message)
class MessageAdmin(MessageColumns, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["session", "position", "role", "tokens", "context_state", "created_at"]
    list_filter = [ContextStateFilter, "role"]
    search_fields = ["content", "session__title"]
    list_select_related = ["session", "compressed_into"]
    readonly_fields = ["context_state"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ClientTask)
class ClientTaskAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Background tasks of outside clients (a chat's title, tags, follow-ups), answered without a session."""

    list_display = ["created_at", "owner", "token", "client", "kind", "model", "prompt_tokens", "completion_tokens"]
    list_filter = ["kind", "client", "model"]
    search_fields = ["prompt", "response", "owner__username", "client"]
    list_select_related = ["owner", "token"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
