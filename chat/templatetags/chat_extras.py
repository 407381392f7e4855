from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from chat.rendering import render_markdown
from contextmgr.core.aging import Level

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    return render_markdown(text)


@register.filter
def level_name(level: int) -> str:
    return Level(level).display


@register.filter
def percent(value: float | None) -> str:
    return "" if value is None else f"{round(value * 100)}%"


# Longer messages are shown collapsed, with "Show all": a pasted log must not push the
# conversation off the screen.
LONG_MESSAGE_CHARS = 3_000


@register.filter
def is_long(text: str) -> bool:
    return len(text) > LONG_MESSAGE_CHARS
