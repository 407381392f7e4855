"""Checkpoints (with every revision), goals, decisions, artifacts, snapshots and events."""

from __future__ import annotations

from typing import Any

from django.db import models

from contextmgr.core.aging import Level
from contextmgr.core.ranges import MessageRange
from contextmgr.core.text import StorableJSONEncoder

MAX_GOAL_CHARS = 2000
MAX_PATH_CHARS = 1000


class EventType(models.TextChoices):
    COMPRESSED = "compressed"
    COMPRESSION_SKIPPED = "compression-skipped"
    COMPRESSION_ERROR = "compression-error"
    ROLLOVER_COMPLETE = "rollover-complete"
    CHECKPOINT_CREATED = "checkpoint-created"
    CHECKPOINT_AGED = "checkpoint-aged"
    SNAPSHOT_CREATED = "snapshot-created"
    SNAPSHOT_RESTORED = "snapshot-restored"
    SNAPSHOT_ERROR = "snapshot-error"
    AUTO_SNAPSHOT_CREATED = "auto-snapshot-created"
    # Not the spec's: the model server evaluated only part of a prompt (Ollama's silent truncation).
    PROMPT_TRUNCATED = "prompt-truncated"


LEVEL_CHOICES = [(level.value, f"{level.value} ({level.label})" if level else "ultra") for level in Level]


class Checkpoint(models.Model):
    class Strategy(models.TextChoices):
        SUMMARIZE = "summarize"
        TRUNCATE = "truncate"

    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="checkpoints")
    number = models.PositiveIntegerField(help_text="The compression that created it (1 = first).")
    level = models.PositiveSmallIntegerField(choices=LEVEL_CHOICES, default=Level.RECENT)
    first_position = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Position of the oldest message it stands for; empty when it holds none of its session's.",
    )
    last_position = models.PositiveIntegerField(
        null=True, blank=True, help_text="Position of the newest message it stands for; empty with the first."
    )
    origin = models.CharField(
        max_length=250,
        blank=True,
        help_text='What it stands for besides its session\'s messages, for example "Carried over from “Plans”".',
    )
    summary = models.TextField()
    strategy = models.CharField(max_length=16, choices=Strategy.choices, default=Strategy.SUMMARIZE)
    original_tokens = models.PositiveIntegerField()
    current_tokens = models.PositiveIntegerField()
    compression_count = models.PositiveIntegerField(default=1, help_text="How many times it was compressed.")
    key_decisions = models.JSONField(encoder=StorableJSONEncoder, default=list, blank=True)
    files_modified = models.JSONField(encoder=StorableJSONEncoder, default=list, blank=True)
    next_steps = models.JSONField(encoder=StorableJSONEncoder, default=list, blank=True)
    retention = models.FloatField(
        null=True, blank=True, help_text="Measured share of key facts kept; null if unmeasured."
    )
    facts = models.JSONField(
        encoder=StorableJSONEncoder,
        default=list,
        blank=True,
        help_text="The key facts of the messages it stands for, as [kind, text] pairs; retention is measured on them.",
    )
    ledger = models.JSONField(
        encoder=StorableJSONEncoder,
        default=list,
        blank=True,
        help_text="The facts kept verbatim in the prompt beside the summary, as [kind, text] pairs.",
    )
    merged_into = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="merged_from",
        help_text="Set when it was merged into the ultra checkpoint; it then leaves the active context.",
    )
    retired = models.BooleanField(
        default=False, help_text="Created after the snapshot that was restored; out of the active context."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    compressed_at = models.DateTimeField(null=True, blank=True, help_text="When it was last aged.")

    class Meta:
        ordering = ["session", "number"]
        indexes = [
            # The active checkpoints are read for every budget, meter and prompt: with this index
            # that read costs the few active ones, not every checkpoint a long session ever merged.
            models.Index(fields=["session", "merged_into", "retired", "number"], name="checkpoint_active_idx"),
        ]

    def __str__(self) -> str:
        return f"Checkpoint #{self.number}, {Level(self.level).display}"

    @property
    def level_label(self) -> str:
        return Level(self.level).label

    @property
    def message_range(self) -> MessageRange:
        return MessageRange(self.first_position, self.last_position, self.origin)

    @message_range.setter
    def message_range(self, value: MessageRange) -> None:
        self.first_position, self.last_position, self.origin = value.first, value.last, value.origin

    @property
    def range_label(self) -> str:
        """The range as shown, for example "Messages 1-50" (``contextmgr.core.ranges``)."""
        return self.message_range.label

    @property
    def is_active(self) -> bool:
        return self.merged_into_id is None and not self.retired


class CheckpointRevision(models.Model):
    """One version of a checkpoint's text: created, then each aging or merge."""

    class Reason(models.TextChoices):
        CREATED = "created"
        AGED = "aged"
        MERGED = "merged"
        RESTORED = "restored"

    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="revisions")
    level = models.PositiveSmallIntegerField(choices=LEVEL_CHOICES)
    tokens = models.PositiveIntegerField()
    summary = models.TextField()
    reason = models.CharField(max_length=16, choices=Reason.choices)
    retention = models.FloatField(null=True, blank=True)
    facts_total = models.PositiveIntegerField(default=0)
    facts_kept = models.PositiveIntegerField(default=0)
    missing_facts = models.JSONField(
        encoder=StorableJSONEncoder,
        default=list,
        blank=True,
        help_text="The facts the next prompt lost with this version, [kind, text].",
    )
    ledger_dropped = models.JSONField(
        encoder=StorableJSONEncoder,
        default=list,
        blank=True,
        help_text="Facts the ledger had no room for at this version, [kind, text]; the full history keeps them.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["checkpoint", "id"]

    def __str__(self) -> str:
        return f"{self.checkpoint} {self.reason} at level {self.level}"


class Goal(models.Model):
    class Priority(models.TextChoices):
        HIGH = "high"
        MEDIUM = "medium"
        LOW = "low"

    class Status(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        COMPLETED = "completed"

    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="goals")
    description = models.TextField(max_length=MAX_GOAL_CHARS)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.MEDIUM)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    next_step = models.TextField(blank=True, max_length=MAX_GOAL_CHARS)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session", "created_at"]

    def __str__(self) -> str:
        return self.description[:80]


class GoalCheckpoint(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        IN_PROGRESS = "in-progress"
        COMPLETED = "completed"

    goal = models.ForeignKey(Goal, on_delete=models.CASCADE, related_name="checkpoints")
    description = models.TextField(max_length=MAX_GOAL_CHARS)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["goal", "id"]

    def __str__(self) -> str:
        return self.description[:80]


class Decision(models.Model):
    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="decisions")
    goal = models.ForeignKey(Goal, null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions")
    description = models.TextField(max_length=MAX_GOAL_CHARS)
    locked = models.BooleanField(default=False, help_text="Locked decisions are never compressed or edited by markers.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return ("[locked] " if self.locked else "") + self.description[:80]


class Artifact(models.Model):
    class Action(models.TextChoices):
        CREATED = "created"
        MODIFIED = "modified"

    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="artifacts")
    goal = models.ForeignKey(Goal, null=True, blank=True, on_delete=models.SET_NULL, related_name="artifacts")
    path = models.CharField(max_length=MAX_PATH_CHARS)
    action = models.CharField(max_length=12, choices=Action.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return f"{self.action} {self.path}"


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


class ContextEvent(models.Model):
    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=32, choices=EventType.choices)
    payload = models.JSONField(encoder=StorableJSONEncoder, default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["session", "created_at", "id"]

    def __str__(self) -> str:
        return self.type
