"""Text as it can be stored: what every write of user or model text passes through."""

from __future__ import annotations

import json
import re
from typing import Any

# PostgreSQL text cannot hold NUL bytes (nor can its jsonb hold a \u0000 escape), and UTF-8
# cannot encode an unpaired surrogate (a JSON body can carry one as an escape).
UNSTORABLE_CHARS = re.compile("[\x00\ud800-\udfff]")
# A URL's user information (``user:password@`` after its scheme): an OLLAMA_HOSTS entry may carry a
# proxy's credentials, which no page, answer or log line shows (issue 49, item 4).
URL_CREDENTIALS = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/@]+@")


def without_credentials(text: str) -> str:
    """``text`` with the user information taken out of every URL in it: ``http://u:p@h:11434`` reads
    ``http://h:11434``."""
    return URL_CREDENTIALS.sub(r"\1", text)


# Any URL: an ordinary user is never shown a model host's address (issue 49, item 5).
URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s,;)]*[^\s,;).:]")


def without_urls(text: str) -> str:
    """``text`` with every URL in it replaced by "its host": what an ordinary user reads of an error."""
    return URL.sub("its host", text)


def storable_text(text: str) -> str:
    """NUL bytes and unpaired surrogates become U+FFFD so the rest is stored as written."""
    return UNSTORABLE_CHARS.sub("\ufffd", text)


def storable_json(value: Any) -> Any:
    """``value`` with storable_text applied to every string in it, keys included, at any depth."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_text(k) if isinstance(k, str) else k: storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(v) for v in value]
    return value


class StorableJSONEncoder(json.JSONEncoder):
    """The encoder of every JSON column: tool arguments, event payloads, snapshots and the rest hold
    text from users and models, which passes through storable_text as any other stored text does."""

    def encode(self, o: Any) -> str:
        return super().encode(storable_json(o))


def plural(count: int, noun: str) -> str:
    """``1 checkpoint``, ``2 checkpoints``, ``1,200 messages``: nouns of the app's own wording only."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
