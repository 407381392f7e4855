"""Text as it can be stored: what every write of user or model text passes through."""

from __future__ import annotations

import re

# PostgreSQL text cannot hold NUL bytes, and UTF-8 cannot encode an unpaired
# surrogate (a JSON body can carry one as an escape).
UNSTORABLE_CHARS = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """NUL bytes and unpaired surrogates become U+FFFD so the rest is stored as written."""
    return UNSTORABLE_CHARS.sub("\ufffd", text)
