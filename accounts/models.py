"""Personal API tokens: ``Authorization: Bearer <token>`` for scripts and other tools.

Only the SHA-256 of a token is stored; the token itself is shown once, when it is made.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

MAX_TOKEN_NAME_LENGTH = 100


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=MAX_TOKEN_NAME_LENGTH, help_text="What the token is for.")
    token_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the token, hex.")
    prefix = models.CharField(max_length=8, help_text="The token's first characters, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Off: a client's background tasks (chat.services.client_tasks) are turns of sessions of their own, as before.
    tasks_apart = models.BooleanField(
        default=True,
        help_text="Answer the background tasks of its client (a chat's title, tags, follow-ups) without a session.",
    )

    class Meta:
        ordering = ["user", "-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
