"""Safe rendering of what users and models write: escape everything, then allow a small
markdown subset (fenced code blocks, inline code, bold) built only from escaped text."""

from __future__ import annotations

import re

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

_FENCE = re.compile(r"```([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*([^*\n]+)\*\*")


def _inline(text: str) -> str:
    escaped: str = escape(text)
    escaped = _INLINE_CODE.sub(r"<code>\1</code>", escaped)
    escaped = _BOLD.sub(r"<strong>\1</strong>", escaped)
    paragraphs = [p.strip("\n") for p in re.split(r"\n{2,}", escaped) if p.strip()]
    return "".join(f"<p>{p.replace(chr(10), '<br>')}</p>" for p in paragraphs)


def render_markdown(text: str) -> SafeString:
    """HTML for a message: every character of ``text`` is escaped before any tag is added."""
    parts: list[str] = []
    position = 0
    for fence in _FENCE.finditer(text):
        parts.append(_inline(text[position : fence.start()]))
        language = escape(fence.group(1))
        css = f' class="language-{language}"' if language else ""
        parts.append(f"<pre><code{css}>{escape(fence.group(2).rstrip(chr(10)))}</code></pre>")
        position = fence.end()
    parts.append(_inline(text[position:]))
    return mark_safe("".join(parts))
