"""Snapshots: a session's full state at one moment, never changed after creation."""

from __future__ import annotations

from typing import Any

from django.db import models

from engine.core.text import StorableJSONEncoder


class ImmutableError(RuntimeError):
    pass


class SnapshotQuerySet(models.QuerySet["Snapshot"]):
    def update(self, **kwargs: Any) -> int:
        # bulk_update() goes through here too: no path rewrites a snapshot in place.
        raise ImmutableError("a snapshot never changes after it is created")


class Snapshot(models.Model):
    """The full state of a session at one moment; never changes after creation.

    Each snapshot is self-contained (``state`` holds every message's context
    state), so deleting one never affects restoring another.
    """

    class Kind(models.TextChoices):
        AUTO = "auto"
        MANUAL = "manual"

    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="snapshots")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    reason = models.CharField(max_length=200, blank=True)
    state = models.JSONField(encoder=StorableJSONEncoder)
    token_count = models.PositiveIntegerField()
    message_count = models.PositiveIntegerField()
    checkpoint_count = models.PositiveIntegerField()
    model = models.CharField(max_length=200)
    tier = models.PositiveSmallIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = SnapshotQuerySet.as_manager()

    class Meta:
        db_table = "contextmgr_snapshot"  # kept from the contextmgr app (issue 33)
        ordering = ["session", "-created_at", "-id"]
        indexes = [
            # Whether this compression round has its automatic snapshot yet, asked after every
            # message near the trigger: a lookup, not a scan of every snapshot of a long session.
            models.Index(fields=["session", "kind", "message_count"], name="snapshot_round_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} snapshot {self.created_at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise ImmutableError("a snapshot never changes after it is created")
        super().save(*args, **kwargs)
