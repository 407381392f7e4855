"""A real server (daphne, as `make run` starts it) on its own SQLite file, and Debian's Chromium."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.llm.embedded import MODEL_NAME
from tests.factories import E2E_USERNAME, seed
from tests.support.live_server import serve, server_env
from tests.support.model_server import ModelServerProcess

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


@pytest.fixture(scope="session")
def live_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the shared server's database."""
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def live_url(live_work: Path, model_server: ModelServerProcess) -> Iterator[str]:
    """The server the dashboard tests share, with the e2e user."""
    with serve(live_work, model_server, with_user=True) as url:
        yield url


@pytest.fixture
def live_seed(live_url: str, live_work: Path, model_server: ModelServerProcess) -> Callable[[dict[str, object]], str]:
    """Stores a session of the e2e user on the shared server through the app's services
    (``tests/system/seed.py``'s session order); returns its id."""

    def store(session: dict[str, object]) -> str:
        order = {"owner": E2E_USERNAME, "model": MODEL_NAME, "context_size": 4096, **session}
        return str(seed(server_env(live_work, model_server), {"session": order})["id"])

    return store


@pytest.fixture
def empty_live_url(tmp_path: Path, model_server: ModelServerProcess) -> Iterator[str]:
    """A server of its own on a database with no account at all: a fresh install's first run."""
    with serve(tmp_path, model_server, with_user=False) as url:
        yield url


@pytest.fixture
def scripted(model_server: ModelServerProcess) -> Iterator[ModelServerProcess]:
    """The model server answering with given texts, and back to normal afterwards."""
    yield model_server
    model_server.reset()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"Chromium is not installed at {CHROMIUM}: `make test` installs Debian's chromium package.")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
