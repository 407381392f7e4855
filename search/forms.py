from __future__ import annotations

from typing import Any

from django import forms

from chat.models import Message
from search.models import SearchDocument
from search.query import MAX_QUERY_CHARS
from search.selectors import MAX_PAGE, SearchFilters

ONLY_CHOICES = [
    ("", "everything"),
    ("message", "messages"),
    ("checkpoint", "checkpoint summaries"),
    ("goal", "goals"),
    ("decision", "decisions"),
    ("locked", "locked decisions"),
    ("artifact", "artifacts"),
]


class SearchForm(forms.Form):
    """The search page's query and filters; invalid filters are ignored, never an error page."""

    q = forms.CharField(required=False, label="Search", strip=False)
    model = forms.ChoiceField(required=False, choices=[("", "any model")])
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    role = forms.ChoiceField(required=False, choices=[("", "any role"), *Message.Role.choices])
    only = forms.ChoiceField(required=False, choices=ONLY_CHOICES)
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE, widget=forms.HiddenInput)

    def __init__(self, *args: Any, models: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = [("", "any model"), *((m, m) for m in models)]  # type: ignore[attr-defined]

    def value(self, name: str) -> Any:
        """A cleaned value, or empty when the field was invalid."""
        return self.cleaned_data.get(name) if hasattr(self, "cleaned_data") else None

    @property
    def query(self) -> str:
        return (self.value("q") or "")[: MAX_QUERY_CHARS * 10]

    def filters(self) -> SearchFilters:
        self.is_valid()
        only = self.value("only") or ""
        return SearchFilters(
            model=self.value("model") or "",
            since=self.value("since"),
            until=self.value("until"),
            role=self.value("role") or "",
            kind=SearchDocument.Kind.DECISION if only == "locked" else only,
            locked_only=only == "locked",
        )
