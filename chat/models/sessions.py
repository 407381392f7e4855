"""Chat sessions, their limits, and the background tasks outside clients ask for."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from engine.core.text import StorableJSONEncoder
from engine.core.tiers import ContextProfile
from engine.resources import context_profile, context_profiles

MAX_TITLE_LENGTH = 200
MAX_MODEL_NAME_LENGTH = 200
MAX_SYSTEM_PROMPT_CHARS = 100_000
MAX_MESSAGE_CHARS = 1_000_000
# A session file's sessionId and provider, as kept by an import.
MAX_SOURCE_FIELD_LENGTH = 200
# The selection of a new session's form, and of a session an outside client starts without num_ctx.
DEFAULT_CONTEXT_SIZE = 4096

CONTEXT_SIZE_CHOICES = [
    (p.size, f"{p.label} ({p.ollama_context_size:,} tokens, {p.tier.label})") for p in context_profiles()
]


def check_length(field: str, value: str, limit: int) -> None:
    """A ValidationError naming ``field`` when ``value`` is longer than ``limit`` characters (a MAX_ limit)."""
    if len(value) > limit:
        raise ValidationError({field: f"{field} is {len(value):,} characters long; the limit is {limit:,}."})


class Session(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions")
    title = models.CharField(max_length=MAX_TITLE_LENGTH)
    model = models.CharField(max_length=MAX_MODEL_NAME_LENGTH)
    model_parameter_size_b = models.FloatField(
        null=True, blank=True, help_text="Parameters in billions, used by the reliability score."
    )
    context_size = models.PositiveIntegerField(choices=CONTEXT_SIZE_CHOICES, help_text="The user's selection.")
    max_tokens = models.PositiveIntegerField(help_text="The Ollama context size (num_ctx) of the selection.")
    system_prompt = models.TextField(blank=True, max_length=MAX_SYSTEM_PROMPT_CHARS)
    summary_model = models.CharField(
        max_length=MAX_MODEL_NAME_LENGTH, blank=True, help_text="Model that writes checkpoints; empty: the chat model."
    )
    system_prompt_tokens = models.PositiveIntegerField(default=0)
    settings = models.JSONField(
        encoder=StorableJSONEncoder,
        default=dict,
        blank=True,
        help_text="This session's overrides of the context defaults.",
    )
    compression_count = models.PositiveIntegerField(default=0)
    context_version = models.PositiveBigIntegerField(
        default=0,
        help_text="Raised by every write that changes the active context: its messages, checkpoints, goal block or "
        "locked decisions.",
    )
    compressed_through = models.PositiveIntegerField(
        default=0, help_text="The last message position when the latest compression was applied."
    )
    compression_started_at = models.DateTimeField(
        null=True, blank=True, help_text="Set while a compression runs: at most one per session (a lease)."
    )
    # Kept with the inputs it is computed from (see chat.services) so the
    # session list and the admin can sort and filter on it.
    reliability_score = models.FloatField(default=1.0)
    created_at = models.DateTimeField(auto_now_add=True)
    last_activity = models.DateTimeField(auto_now_add=True, db_index=True)
    # An OLLM session file names its session and provider; an imported session keeps both, so its
    # export gives them back and a second import of the same file is recognised.
    source_session_id = models.CharField(
        max_length=MAX_SOURCE_FIELD_LENGTH,
        blank=True,
        help_text="The sessionId of the OLLM session file it was imported from (its export writes it back); "
        "empty: started here, exported under its own id.",
    )
    source_provider = models.CharField(
        max_length=MAX_SOURCE_FIELD_LENGTH,
        blank=True,
        help_text="The provider the imported file named (its export writes it back); empty: the backend's own.",
    )
    source_metadata = models.JSONField(
        encoder=StorableJSONEncoder,
        default=dict,
        blank=True,
        help_text="What the imported file's metadata held that this app does not use (the CLI's modeHistory); "
        "its export writes it back.",
    )

    # A session started through the Ollama or OpenAI endpoint (chat.dropin.common): the client that sent it,
    # and the digest of the history that client holds (engine.core.client_history).
    client = models.CharField(
        max_length=MAX_SOURCE_FIELD_LENGTH,
        blank=True,
        help_text="The client (its User-Agent) that started it through the Ollama or OpenAI endpoint; "
        "empty: started here.",
    )
    client_digest = models.CharField(
        max_length=64,
        blank=True,
        db_index=True,
        help_text="The digest of the history its client holds: the client's next request that resends it "
        "continues this session.",
    )

    # A branch (chat.services.sessions.session_branch) shares its parent's history up to the fork and starts
    # from the parent's managed state there; the parent is never changed by it.
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="branches",
        help_text="The session this one branched from; empty: not a branch (or its parent was deleted).",
    )
    forked_at_position = models.PositiveIntegerField(
        null=True, blank=True, help_text="The last message position it shares with its parent."
    )

    # Issue 47: a session started without a title gets one once it has its first reply
    # (chat.services.titles); archived, it leaves the lists until it is unarchived.
    title_pending = models.BooleanField(
        default=False, help_text="Started without a title: one is written once it has its first reply."
    )
    archived_at = models.DateTimeField(
        null=True, blank=True, db_index=True, help_text="Set while archived: hidden from the session lists."
    )

    class Meta:
        ordering = ["-last_activity"]
        constraints = [
            # One session per file and user: a second import updates it, or is a copy under its own id.
            models.UniqueConstraint(
                fields=["owner", "source_session_id"],
                condition=~models.Q(source_session_id=""),
                name="session_source_unique",
            )
        ]

    def __str__(self) -> str:
        return self.title

    def next_context_version(self, **also: Any) -> int:
        """Raise the context version, writing the fields in ``also`` in the same update;
        precondition: the session row is locked in the current transaction."""
        self.context_version += 1
        Session.objects.filter(pk=self.pk).update(context_version=self.context_version, **also)
        for field, value in also.items():
            setattr(self, field, value)
        return self.context_version

    @property
    def file_session_id(self) -> str:
        """The sessionId of its session file: the imported file's, or its own id."""
        return self.source_session_id or str(self.id)

    @property
    def summarizer(self) -> str:
        """The model that writes this session's checkpoints: its own choice, the global one, or the chat model."""
        return self.summary_model or settings.OLLM_SUMMARY_MODEL or self.model

    @property
    def profile(self) -> ContextProfile:
        return context_profile(self.context_size)

    @property
    def tier(self) -> int:
        return self.profile.tier.number


class ClientTask(models.Model):
    """A background task an outside client asked for through the Ollama or OpenAI endpoint (a chat's
    title, tags, follow-up questions…, ``engine.core.client_tasks``): answered by the model from
    the request as sent, kept here for review instead of as a session of its own."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="client_tasks")
    token = models.ForeignKey(
        "accounts.ApiToken",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="client_tasks",
        help_text="The API token the request came with.",
    )
    client = models.CharField(max_length=MAX_SOURCE_FIELD_LENGTH, blank=True, help_text="The client that sent it.")
    kind = models.CharField(max_length=20, help_text="What it asked for (engine.core.client_tasks.TASK_KINDS).")
    model = models.CharField(max_length=MAX_MODEL_NAME_LENGTH)
    prompt = models.TextField(help_text="The request's messages, as sent.")
    response = models.TextField(blank=True, help_text="The model's answer, or the part it gave before a failure.")
    error = models.TextField(blank=True, help_text="Why it was not answered; empty when it was.")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    model_seconds = models.FloatField(default=0.0, help_text="The model's time: evaluating the prompt and writing.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} via {self.client or 'unknown client'}"


class ChatDefaults(models.Model):
    """What a user's new chat starts with (the account page; ``chat.services.defaults``)."""

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_defaults")
    model = models.CharField(
        max_length=MAX_MODEL_NAME_LENGTH, blank=True, help_text="Empty: the first model the backend offers."
    )
    context_size = models.PositiveIntegerField(choices=CONTEXT_SIZE_CHOICES, default=DEFAULT_CONTEXT_SIZE)
    system_prompt = models.TextField(
        blank=True, max_length=MAX_SYSTEM_PROMPT_CHARS, help_text="Custom instructions: the new chat's system prompt."
    )

    def __str__(self) -> str:
        return f"defaults of {self.owner}"
