"""The search index: one row per searchable text of a session, written only by database triggers.

Every message (compressed or not), checkpoint (summary and structured fields),
goal, decision and artifact has one ``SearchDocument``. Triggers on the source
tables (see migration 0002) insert, update and delete it in the same statement
that writes the source row, so the index is never rebuilt at query time. The
full-text index over ``body`` is the database's own: an FTS5 table on SQLite, a
GIN index on a ``tsvector`` expression on PostgreSQL.
"""

from __future__ import annotations

from django.db import models


class SearchDocument(models.Model):
    class Kind(models.TextChoices):
        MESSAGE = "message"
        CHECKPOINT = "checkpoint"
        GOAL = "goal"
        DECISION = "decision"
        ARTIFACT = "artifact"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    ref_id = models.BigIntegerField(help_text="The id of the message, checkpoint, goal, decision or artifact.")
    session = models.ForeignKey("chat.Session", on_delete=models.CASCADE, related_name="search_documents")
    role = models.CharField(max_length=16, blank=True, help_text="A message's role; empty for the other kinds.")
    position = models.PositiveIntegerField(null=True, blank=True, help_text="A message's position.")
    locked = models.BooleanField(default=False, help_text="A locked decision.")
    created_at = models.DateTimeField()
    body = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "ref_id"], name="search_document_unique")]
        indexes = [models.Index(fields=["session", "kind"], name="search_document_session_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.ref_id}"
