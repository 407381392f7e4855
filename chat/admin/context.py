from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from chat.models import (
    Artifact,
    Checkpoint,
    CheckpointRevision,
    ContextEvent,
    Decision,
    Goal,
    GoalCheckpoint,
    Snapshot,
)
from chat.selectors.presentation import describe_event, percent


class EventColumns:
    """An event's timeline line, for the events' pages and the session's."""

    @admin.display(description="what happened")
    def what_happened(self, event: ContextEvent) -> str:
        return describe_event(event.type, event.payload)


class RetentionColumns:
    """Retention as the timeline shows it, a whole percent, rather than a long float."""

    @admin.display(description="retention")
    def retention_percent(self, row: Checkpoint | CheckpointRevision) -> str:
        return percent(row.retention) or "not measured"


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReviewOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """History is written by the app's services; the admin is for review."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class RevisionInline(RetentionColumns, ReadOnlyInline):
    model = CheckpointRevision
    readonly_fields = ("created_at", "reason", "level", "tokens", "retention_percent", "summary")
    fields = readonly_fields
    show_change_link = False


@admin.register(Checkpoint)
class CheckpointAdmin(RetentionColumns, ReviewOnlyAdmin):
    list_display = [
        "__str__",
        "session",
        "range_label",
        "original_tokens",
        "current_tokens",
        "compression_count",
        "merged_into",
        "created_at",
    ]
    list_filter = ["level", "strategy"]
    search_fields = ["summary", "session__title"]
    list_select_related = ["session", "merged_into"]
    exclude = ["retention"]
    readonly_fields = ["retention_percent"]
    inlines = [RevisionInline]


class GoalCheckpointInline(ReadOnlyInline):
    model = GoalCheckpoint
    readonly_fields = ("description", "status", "updated_at")
    fields = readonly_fields


class DecisionInline(ReadOnlyInline):
    model = Decision
    readonly_fields = ("description", "locked", "updated_at")
    fields = readonly_fields


class ArtifactInline(ReadOnlyInline):
    model = Artifact
    readonly_fields = ("action", "path", "created_at")
    fields = readonly_fields


@admin.register(Goal)
class GoalAdmin(ReviewOnlyAdmin):
    list_display = ["description", "session", "priority", "status", "next_step", "updated_at"]
    list_filter = ["status", "priority"]
    search_fields = ["description", "session__title"]
    inlines = [GoalCheckpointInline, DecisionInline, ArtifactInline]


@admin.register(Decision)
class DecisionAdmin(ReviewOnlyAdmin):
    list_display = ["__str__", "session", "goal", "locked", "updated_at"]
    list_filter = ["locked"]
    search_fields = ["description", "session__title"]


@admin.register(Artifact)
class ArtifactAdmin(ReviewOnlyAdmin):
    list_display = ["path", "action", "session", "created_at"]
    list_filter = ["action"]
    search_fields = ["path", "session__title"]


@admin.register(Snapshot)
class SnapshotAdmin(ReviewOnlyAdmin):
    list_display = [
        "__str__",
        "session",
        "kind",
        "reason",
        "token_count",
        "message_count",
        "checkpoint_count",
        "model",
        "tier",
    ]
    list_filter = ["kind", "tier"]
    search_fields = ["session__title", "reason"]


@admin.register(ContextEvent)
class ContextEventAdmin(EventColumns, ReviewOnlyAdmin):
    list_display = ["created_at", "type", "what_happened", "session"]
    list_filter = ["type"]
    search_fields = ["session__title"]
    list_select_related = ["session"]
    readonly_fields = ["what_happened"]
