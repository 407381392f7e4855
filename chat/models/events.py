"""The context events of a session (compression, checkpoints, snapshots…) and their types."""

from __future__ import annotations

from django.db import models

from engine.core.text import StorableJSONEncoder


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
    # Not the spec's: a turn's prompt brought messages that had left the context back from the history.
    RECALLED = "recalled"
    # Not the spec's: the session's model was switched, and its context recounted for the new one (issue 47, item 10).
    MODEL_SWITCHED = "model-switched"


class ContextEvent(models.Model):
    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=32, choices=EventType.choices)
    payload = models.JSONField(encoder=StorableJSONEncoder, default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "contextmgr_contextevent"  # kept from the contextmgr app (issue 33)
        ordering = ["session", "created_at", "id"]

    def __str__(self) -> str:
        return self.type
