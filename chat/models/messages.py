"""A session's full message history.

A message is never edited or deleted by compression: ``compressed_into`` only
says which checkpoint stands for it in the active context.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from chat.models.sessions import MAX_MESSAGE_CHARS
from engine.core.text import StorableJSONEncoder


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", "user"
        ASSISTANT = "assistant", "assistant"
        SYSTEM = "system", "system"
        TOOL = "tool", "tool"

    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="messages")
    position = models.PositiveIntegerField(help_text="1-based order within the session.")
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True, max_length=MAX_MESSAGE_CHARS)
    tokens = models.PositiveIntegerField(help_text="Counted once when stored.")
    tokens_exact = models.BooleanField(default=False, help_text="Counted by the model's own tokenizer.")
    # Not auto_now_add, which would overwrite an imported message's own time.
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    compressed_into = models.ForeignKey(
        "chat.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    done_reason = models.CharField(
        max_length=16,
        blank=True,
        help_text='How a reply ended: "stop", "length" (cut by the cap), "cancelled" or "error" (its host failed).',
    )
    context_version = models.PositiveBigIntegerField(
        default=0, help_text="The session's context_version when this message's context state last changed."
    )
    excluded_from_context = models.BooleanField(
        default=False,
        help_text="Kept in the full history only: written after a restored snapshot, or too long for the context.",
    )
    # A regenerated reply or an edited message is a new message at the end of the history; it names the
    # first version (never a later one), so a version's siblings are one lookup away.
    version_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="versions",
        help_text="The first version of the message this one is another version of (a regenerated reply, "
        "an edited message); empty: a first version.",
    )
    tool_call_id = models.CharField(
        max_length=200, blank=True, help_text="Links a tool call and its results; they are compressed together."
    )
    tool_name = models.CharField(max_length=200, blank=True)
    tool_args = models.JSONField(encoder=StorableJSONEncoder, null=True, blank=True)
    tool_result = models.JSONField(encoder=StorableJSONEncoder, null=True, blank=True)
    attachment_name = models.CharField(
        max_length=255,
        blank=True,
        help_text="The name of the text file attached to this user message, whose text its content holds "
        "(a fenced block headed by the name); the page shows it as a chip.",
    )
    source_format = models.JSONField(
        encoder=StorableJSONEncoder,
        null=True,
        blank=True,
        help_text="How the imported file wrote this entry where the history does not say it: the lengths of its "
        "text parts, a tool result's returnDisplay; its export writes it the same way.",
    )

    class Meta:
        ordering = ["session", "position"]
        constraints = [models.UniqueConstraint(fields=["session", "position"], name="message_position_unique")]
        indexes = [
            # The active context is read on every turn: with the session and the
            # null checkpoint both matched by this index, that read (and the budget's
            # sum) stays proportional to the uncompressed messages, not the history.
            models.Index(fields=["session", "compressed_into", "position"], name="message_active_idx"),
            # Snapshots store only the messages changed since the previous one.
            models.Index(fields=["session", "context_version"], name="message_version_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.position} {self.role}"
