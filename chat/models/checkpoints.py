"""Checkpoints: what stands for compressed messages in the active context, with every revision of its text."""

from __future__ import annotations

from django.db import models

from engine.core.aging import Level
from engine.core.ranges import MessageRange
from engine.core.text import StorableJSONEncoder

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
        db_table = "contextmgr_checkpoint"  # kept from the contextmgr app (issue 33)
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
        """The range as shown, for example "Messages 1-50" (``engine.core.ranges``)."""
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
        db_table = "contextmgr_checkpointrevision"  # kept from the contextmgr app (issue 33)
        ordering = ["checkpoint", "id"]

    def __str__(self) -> str:
        return f"{self.checkpoint} {self.reason} at level {self.level}"
