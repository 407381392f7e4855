from __future__ import annotations

from datetime import datetime

from django import template
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.safestring import SafeString

from chat.models import Message
from chat.selectors import presentation
from chat.selectors.sessions import VersionSwitch, client_tasks_recent
from chat.web.rendering import render_markdown
from engine.core.text import without_credentials as _without_credentials

register = template.Library()


@register.filter
def without_credentials(text: str) -> str:
    """A text naming hosts, its URLs without ``user:password@`` (the backend line staff see)."""
    return _without_credentials(str(text))


@register.inclusion_tag("chat/_client_tasks.html", takes_context=True)
def client_tasks_recent_table(context: template.Context) -> dict[str, object]:
    """The newest background tasks of the user's clients, for the API tokens page (accounts), which
    knows nothing of chat."""
    return {"tasks": client_tasks_recent(user=context["request"].user)}


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    return render_markdown(text)


@register.filter
def ago(value: datetime | None) -> str:
    """How long ago ``value`` was ("3 minutes ago"); a time still to come (a clock set ahead, an
    imported file's) as its date, never as "years from now" (issue 47, item 8)."""
    if value is None:
        return ""
    if value > timezone.now():
        return date_format(timezone.localtime(value) if timezone.is_aware(value) else value, "j M Y, H:i")
    return str(naturaltime(value))


@register.filter
def level_name(level: int) -> str:
    return presentation.level_name(level)


@register.filter
def percent(value: float | None) -> str:
    return presentation.percent(value)


@register.filter
def context_state(message: Message) -> str:
    """Where the message stands; its checkpoint should be fetched with it (select_related)."""
    checkpoint = message.compressed_into
    if checkpoint is not None and checkpoint.retired:
        checkpoint = None  # retired by a restore: the message is what the restore left it (issue 47, item 6)
    return presentation.describe_message_state(
        checkpoint_number=None if checkpoint is None else checkpoint.number,
        checkpoint_level=None if checkpoint is None else checkpoint.level,
        merged=checkpoint is not None and checkpoint.merged_into_id is not None,
        excluded=message.excluded_from_context,
    )


# Longer messages are shown collapsed, with "Show all": a pasted log must not push the
# conversation off the screen.
LONG_MESSAGE_CHARS = 3_000


@register.filter
def is_long(text: str) -> bool:
    return len(text) > LONG_MESSAGE_CHARS


@register.filter
def version_switch(message: Message, switches: dict[int, VersionSwitch]) -> VersionSwitch | None:
    """The ‹ n/m › of a message with other versions, from the history's ``version_switches``."""
    return switches.get(message.pk)
