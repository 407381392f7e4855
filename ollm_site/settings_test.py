"""Settings for the test suite: the embedded default plus a fixed secret and fast password hashing."""

from __future__ import annotations

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key")

from ollm_site.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, not shared-cache memory: background compressions write from
    # other threads, and only a file database makes them wait for the lock.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / f"test-{os.getpid()}.sqlite3")}  # noqa: F405
else:
    # One test database per run, so two checkouts can test against one server at once.
    DATABASES["default"]["TEST"] = {"NAME": f"test_ollm_{os.getpid()}"}  # noqa: F405
