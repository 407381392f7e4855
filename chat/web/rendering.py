"""Safe rendering of what users and models write: CommonMark with tables (markdown-it-py, raw HTML
off), then sanitized by nh3 against an allow-list of tags, attributes and link schemes. Fenced
code with a language Pygments knows is highlighted on the server, and every code block gets a Copy
button (static/js/copy.js copies its text).

markdown-it with ``html=False`` already escapes every character of the text; nh3 is the second
line, so that a bug or a plugin in the renderer cannot put a script, a handler or a remote fetch
on the page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html.parser import HTMLParser

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

ALLOWED_TAGS = frozenset(
    {
        *("p", "br", "hr", "blockquote", "pre", "code", "strong", "em"),
        *("h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "a"),
        *("table", "thead", "tbody", "tr", "th", "td"),
        "span",  # Pygments' token spans in a code block
    }
)
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "span": {"class"},
    "ol": {"start"},
    "th": {"style"},
    "td": {"style"},
}
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"
_LINK = re.compile(rf"(?:{'|'.join(sorted(LINK_SCHEMES))}):", re.I)
_LANGUAGE_CLASS = re.compile(r"language-[\w+#.-]{1,40}")


# Every class Pygments' HTML formatter writes on a token's span: one to three letters, maybe a
# digit ("k", "s2", "cpf"); static/css/site.css colours them, light and dark.
TOKEN_CLASS = re.compile(r"[a-z]{1,3}[0-9]?")
# Past this a block is shown plain: lexing is linear but not free, and a page renders many messages.
MAX_HIGHLIGHTED_CHARS = 50_000
_FORMATTER = HtmlFormatter(nowrap=True)


def highlight_code(code: str, language: str, _attributes: str) -> str:
    """markdown-it's ``highlight`` hook: ``code`` as Pygments' spans (its text escaped; the
    sanitizer keeps only those spans and classes), or "" (markdown-it then escapes it as plain
    text) when the block names no language, one Pygments does not know, or is too long."""
    if not language or len(code) > MAX_HIGHLIGHTED_CHARS:
        return ""
    try:
        # stripnl off: the block's leading and trailing blank lines are its text, and Copy copies them.
        lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return ""
    highlighted: str = highlight(code, lexer, _FORMATTER)
    return highlighted


def _image_as_text(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # The app runs offline and its pages must not fetch: an image is shown as its alt text.
    children = tokens[idx].children or []
    return escape(renderer.renderInlineAsText(children, options, env))


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    # nh3's scheme list lets relative URLs through; a link from a model must leave the app or go nowhere.
    if attribute == "href":
        return value if _LINK.match(value) else None
    if tag == "code" and attribute == "class":
        return value if _LANGUAGE_CLASS.fullmatch(value) else None
    if tag == "span" and attribute == "class":
        return value if TOKEN_CLASS.fullmatch(value) else None
    return value


# Single newlines are line breaks, as people and models write them in a chat.
_MARKDOWN = MarkdownIt(
    "commonmark", {"html": False, "breaks": True, "xhtmlOut": False, "highlight": highlight_code}
).enable("table")
_MARKDOWN.add_render_rule("image", _image_as_text)


class _EscapedWriter(HTMLParser):
    """Writes nh3's output again, every text and attribute value through Django's ``escape``.

    nh3 writes quotes bare in text (``"'``); every other text on the pages is escaped by Django
    (``&quot;&#x27;``), and a message must read the same, escaped, wherever it is shown and
    looked for. Attributes come out sorted, as nh3 writes the ones it adds in no fixed order. The
    input is nh3's well-formed output, so only its tags come out as tags: comments and
    declarations, which it never writes, would be dropped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        written = "".join(f' {name}="{escape(value or "")}"' for name, value in sorted(attrs))
        self.parts.append(f"<{tag}{written}>")

    def handle_endtag(self, tag: str) -> None:
        self.parts.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        self.parts.append(escape(data))


def sanitize_html(html: str) -> str:
    """Only the allow-listed tags and attributes of ``html``, links with the allowed schemes and
    ``rel`` set, everything else dropped (a script's or a style's content with its tag)."""
    cleaned: str = nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        attributes=ALLOWED_ATTRIBUTES,
        attribute_filter=_attribute_filter,
        url_schemes=set(LINK_SCHEMES),
        link_rel=LINK_REL,
        # A link opens beside the chat, whose reply may still be streaming.
        set_tag_attribute_values={"a": {"target": "_blank"}},
        filter_style_properties={"text-align"},
    )
    writer = _EscapedWriter()
    writer.feed(cleaned)
    writer.close()
    return "".join(writer.parts)


# After sanitizing, every "<pre>" is a code block's: a "<pre>" in the text was escaped to "&lt;pre&gt;".
_CODE_BLOCK_OPEN = (
    '<div class="code-block"><button type="button" class="icon-button copy-code" data-action="copy-code"'
    ' title="Copy this code">Copy code</button><pre>'
)


def render_markdown(text: str) -> SafeString:
    """HTML for a message: markdown rendered with raw HTML escaped, then only allow-listed markup
    kept; each code block with its Copy button."""
    html = sanitize_html(_MARKDOWN.render(text))
    return mark_safe(html.replace("<pre>", _CODE_BLOCK_OPEN).replace("</pre>", "</pre></div>"))
