"""Django for a benchmark: its own throwaway SQLite file, the embedded defaults, quiet logs, its own model server."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_django() -> Path:
    """Configure and start Django on a fresh database file; returns that file's path."""
    sys.path.insert(0, str(ROOT))
    database = Path(tempfile.mkdtemp()) / "bench.sqlite3"
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "ollm_site.settings",
            "SECRET_KEY": "bench-only",
            "DATABASE_URL": f"sqlite:///{database}",
            "OLLM_ENV_FILE": str(database.with_suffix(".env")),
            "LOG_LEVEL": "WARNING",
        }
    )
    import django

    django.setup()
    return database


def use_model_server(url: str) -> None:
    """Point the app's gateway (``get_gateway()``) at the model server at ``url``: the benchmark's own."""
    from django.conf import settings

    from chat.gateway import get_gateway

    settings.OLLM_MODEL_SERVER_URL = url
    get_gateway.cache_clear()
