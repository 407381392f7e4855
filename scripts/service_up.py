"""Exit 0 when the service at a URL answers, 1 otherwise (used by `make test` to decide on the PostgreSQL pass)."""

from __future__ import annotations

import socket
import sys
from urllib.parse import urlsplit


def main(url: str) -> int:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), timeout=2):
            return 0
    except OSError:
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
