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
    name = Level(level).label
    return name if level == Level.ULTRA else f"level {level} ({name})"


@register.filter
def percent(value: float | None) -> str:
    return "" if value is None else f"{round(value * 100)}%"
