"""A real server (daphne, as `make run` starts it) on its own SQLite file, and Debian's Chromium."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.factories import E2E_PASSWORD, E2E_USERNAME
from tests.support.model_server import ModelServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("OLLM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def serve(work: Path, model_server: ModelServerProcess, *, with_user: bool) -> Iterator[str]:
    """A daphne server on a new SQLite file in ``work``, migrated, with the e2e user when ``with_user``."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "ollm_site.settings",
        "OLLM_ENV_FILE": str(work / "none.env"),
        "SECRET_KEY": "e2e-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
        "DATABASE_URL": f"sqlite:///{work / 'e2e.sqlite3'}",
        "OLLM_LLM_BACKEND": "embedded",
        "OLLM_MODEL_SERVER_URL": model_server.url,
        "OLLM_REPLY_MAX_TOKENS": "40",
        "OLLM_CHAT_TEMPERATURE": "0",
    }
    env.pop("REDIS_URL", None)
    python = sys.executable
    manage = [python, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True, capture_output=True)
    subprocess.run([*manage, "collectstatic", "--noinput", "--verbosity", "0"], env=env, check=True)
    if with_user:
        create = (
            "from django.contrib.auth import get_user_model; "
            f"get_user_model().objects.create_user('{E2E_USERNAME}', password='{E2E_PASSWORD}')"
        )
        subprocess.run([*manage, "shell", "-c", create], env=env, check=True)
    port = free_port()
    log = (work / "daphne.log").open("w")
    server = subprocess.Popen(
        [str(Path(python).with_name("daphne")), "-b", "127.0.0.1", "-p", str(port), "ollm_site.asgi:application"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {(work / 'daphne.log').read_text()}") from None
            time.sleep(0.2)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            # A compression thread still talking to the model holds daphne's shutdown: nothing is left to keep.
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="session")
def live_url(tmp_path_factory: pytest.TempPathFactory, model_server: ModelServerProcess) -> Iterator[str]:
    """The server the dashboard tests share, with the e2e user."""
    with serve(tmp_path_factory.mktemp("e2e"), model_server, with_user=True) as url:
        yield url


@pytest.fixture
def empty_live_url(tmp_path: Path, model_server: ModelServerProcess) -> Iterator[str]:
    """A server of its own on a database with no account at all: a fresh install's first run."""
    with serve(tmp_path, model_server, with_user=False) as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"Chromium is not installed at {CHROMIUM}: `make test` installs Debian's chromium package.")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
