from __future__ import annotations

from typing import Any

from django import forms

from chat.models import (
    CONTEXT_SIZE_CHOICES,
    DEFAULT_CONTEXT_SIZE,
    MAX_GOAL_CHARS,
    MAX_SYSTEM_PROMPT_CHARS,
    MAX_TITLE_LENGTH,
)


class SessionForm(forms.Form):
    title = forms.CharField(max_length=MAX_TITLE_LENGTH, required=False)
    model = forms.ChoiceField(choices=[])
    context_size = forms.TypedChoiceField(choices=CONTEXT_SIZE_CHOICES, coerce=int, initial=DEFAULT_CONTEXT_SIZE)
    system_prompt = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=MAX_SYSTEM_PROMPT_CHARS
    )
    goal = forms.CharField(max_length=MAX_GOAL_CHARS, required=False, help_text="Optional: pinned, never compressed.")

    def __init__(self, *args: Any, models: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["model"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(name, name) for name in models]


class RenameForm(forms.Form):
    title = forms.CharField(max_length=MAX_TITLE_LENGTH)


class ChatDefaultsForm(forms.Form):
    """The account page's defaults of a new chat."""

    model = forms.ChoiceField(choices=[], required=False, help_text="Empty: the first model the backend offers.")
    context_size = forms.TypedChoiceField(choices=CONTEXT_SIZE_CHOICES, coerce=int, initial=DEFAULT_CONTEXT_SIZE)
    system_prompt = forms.CharField(
        label="Custom instructions",
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        max_length=MAX_SYSTEM_PROMPT_CHARS,
        help_text="The system prompt of every new chat.",
    )

    def __init__(self, *args: Any, models: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["model"]
        assert isinstance(field, forms.ChoiceField)
        saved = str(self.initial.get("model") or "")
        names = models + ([saved] if saved and saved not in models else [])
        field.choices = [("", "The first model offered"), *((name, name) for name in names)]
