"""A text file attached to a user message (issue 47, item 9): checked, written into the message's content as
a fenced block headed by its name (so it is counted in the budget, compressed and recalled like any
message, its facts kept), its name kept on the message (the page's chip) and recorded as an artifact of
the session."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath

from django.core.exceptions import ValidationError
from django.db import transaction

from chat.models import Artifact, Message, Session
from chat.services.goals import artifact_record
from chat.services.messages import message_create
from engine.core.tokens import TokenCount

# 100,000 bytes: about 25,000 tokens of English or code, the most that leaves a 32K context room for the
# conversation around it; a larger file could never fit the 2K-8K contexts the bundled model runs.
MAX_ATTACHMENT_BYTES = 100_000
MAX_NAME_CHARS = 255
# Plain text, markdown, code, CSV, JSON and the like; a name without a suffix (Makefile, README) is read
# too, if its content is text.
TEXT_SUFFIXES = frozenset(
    [
        ".txt",
        ".text",
        ".md",
        ".markdown",
        ".rst",
        ".csv",
        ".tsv",
        ".json",
        ".jsonl",
        ".ndjson",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".conf",
        ".env",
        ".log",
        ".xml",
        ".html",
        ".htm",
        ".css",
        ".scss",
        ".js",
        ".mjs",
        ".cjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".py",
        ".pyi",
        ".rb",
        ".php",
        ".pl",
        ".lua",
        ".r",
        ".jl",
        ".go",
        ".rs",
        ".java",
        ".kt",
        ".kts",
        ".scala",
        ".swift",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".cxx",
        ".hpp",
        ".cs",
        ".m",
        ".sh",
        ".bash",
        ".zsh",
        ".fish",
        ".ps1",
        ".bat",
        ".sql",
        ".graphql",
        ".proto",
        ".tex",
        ".bib",
        ".diff",
        ".patch",
        ".srt",
        ".vtt",
        ".dockerfile",
        ".gitignore",
        ".properties",
        ".gradle",
        ".vue",
        ".svelte",
    ]
)
KINDS = "plain text, markdown, code, CSV or JSON"
# The file picker's filter (the page's <input type=file accept>).
ATTACHMENT_ACCEPT = ",".join([*sorted(TEXT_SUFFIXES), "text/*", "application/json"])
_BACKTICKS = re.compile(r"`{3,}")


@dataclass(frozen=True)
class Attachment:
    name: str
    text: str


def attachment_check(*, name: str, text: str) -> Attachment:
    """The attachment, its name reduced to the file's own name; a ValidationError saying what is wrong for a
    name that is not a text file's, a file over MAX_ATTACHMENT_BYTES, or one that holds binary data."""
    base = PureWindowsPath(PurePosixPath(name).name).name.strip()
    if not base or len(base) > MAX_NAME_CHARS or any(unicodedata.category(c) == "Cc" for c in base):
        raise ValidationError({"attachment": "The attached file needs a name of at most 255 characters."})
    suffix = PurePosixPath(base.lower()).suffix
    if suffix and suffix not in TEXT_SUFFIXES:
        raise ValidationError(
            {"attachment": f"{base}: {suffix} files are not read as text. Attach {KINDS}; nothing was sent."}
        )
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ATTACHMENT_BYTES:
        raise ValidationError(
            {
                "attachment": f"{base} is {size:,} bytes; an attached file can be at most {MAX_ATTACHMENT_BYTES:,} "
                "bytes (about 25,000 tokens). Nothing was sent: attach a smaller file or paste the part you need."
            }
        )
    if _binary(text):
        raise ValidationError(
            {"attachment": f"{base} is not a text file (it holds binary data). Attach {KINDS}; nothing was sent."}
        )
    return Attachment(base, text)


def _binary(text: str) -> bool:
    """NUL bytes, undecodable bytes (U+FFFD) or more than 1% control characters: not text."""
    if "\x00" in text or "\ufffd" in text:
        return True
    controls = sum(1 for c in text if unicodedata.category(c) == "Cc" and c not in "\t\n\r\f")
    return controls > len(text) / 100


def attachment_content(*, message: str, attachment: Attachment) -> str:
    """The user message as stored: its text, then the file's, fenced (with more backticks than any run in
    the file) under a line that names it."""
    longest = max((len(run) for run in _BACKTICKS.findall(attachment.text)), default=2)
    fence = "`" * max(3, longest + 1)
    body = attachment.text if attachment.text.endswith("\n") else attachment.text + "\n"
    head = f"{message.rstrip()}\n\n" if message.strip() else ""
    return f"{head}{_heading(attachment.name)}\n{fence}\n{body}{fence}"


def _heading(name: str) -> str:
    """The line that names the file above its block in the message."""
    return f"Attached file: {name}"


def attachment_still_in(*, name: str, content: str) -> bool:
    """Whether ``content`` (an edited message's) still holds the block of the file ``name`` that
    ``attachment_content`` wrote: its heading line."""
    return bool(name) and f"{_heading(name)}\n" in content


@transaction.atomic
def message_attach(*, session: Session, content: str, attachment: Attachment, token_count: TokenCount) -> Message:
    """Store the user message ``content`` (``attachment_content``'s) with the file's name, and record the file
    as an artifact of the session, together (the artifact first: the message's ``session`` is then the
    session as both left it)."""
    artifact_record(session=session, path=attachment.name, action=Artifact.Action.ATTACHED)
    return message_create(
        session=session,
        role=Message.Role.USER,
        content=content,
        token_count=token_count,
        attachment_name=attachment.name,
    )
