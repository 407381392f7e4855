"""A user's defaults for a new chat (the account page): model, context size and custom instructions."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from chat.models import MAX_MODEL_NAME_LENGTH, MAX_SYSTEM_PROMPT_CHARS, ChatDefaults, check_length
from engine.core.text import storable_text
from engine.resources import context_profiles


@transaction.atomic
def chat_defaults_update(*, owner: Any, model: str, context_size: int, system_prompt: str) -> ChatDefaults:
    """Save what ``owner``'s new chats start with; ``model`` empty: the first model the backend offers.
    A ValidationError for a context size that is not one of the selections, or text over its limit."""
    model = storable_text(model).strip()
    system_prompt = storable_text(system_prompt)
    check_length("model", model, MAX_MODEL_NAME_LENGTH)
    check_length("system_prompt", system_prompt, MAX_SYSTEM_PROMPT_CHARS)
    if context_size not in {profile.size for profile in context_profiles()}:
        raise ValidationError({"context_size": f"{context_size} is not one of the context sizes."})
    defaults, _ = ChatDefaults.objects.select_for_update().get_or_create(owner=owner)
    defaults.model = model
    defaults.context_size = context_size
    defaults.system_prompt = system_prompt
    defaults.save()
    return defaults
