"""A real server (daphne, as `make run` starts it) on its own SQLite file: the browser tests' and the
drop-in endpoint's, whose clients talk HTTP to it as they would to Ollama."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.factories import E2E_PASSWORD, E2E_USERNAME, GREEDY_REPLIES
from tests.support.model_server import ModelServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


def server_env(work: Path, model_server: ModelServerProcess, *, reply_max_tokens: int | None = 40) -> dict[str, str]:
    """The environment of the server on ``work``'s database, and of commands run against it;
    ``reply_max_tokens``: the cap on a reply (short for quick tests; None: the app's default)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "ollm_site.settings",
        "OLLM_ENV_FILE": str(work / "none.env"),
        "SECRET_KEY": "e2e-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
        "DATABASE_URL": f"sqlite:///{work / 'e2e.sqlite3'}",
        "OLLM_LLM_BACKEND": "embedded",
        "OLLM_MODEL_SERVER_URL": model_server.url,
        "OLLM_CONTEXT_DEFAULTS": json.dumps(GREEDY_REPLIES),
    }
    if reply_max_tokens is not None:
        env["OLLM_REPLY_MAX_TOKENS"] = str(reply_max_tokens)
    env.pop("REDIS_URL", None)
    return env


@contextmanager
def serve(
    work: Path,
    model_server: ModelServerProcess,
    *,
    with_user: bool,
    reply_max_tokens: int | None = 40,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """A daphne server on a new SQLite file in ``work``, migrated, with the e2e user when ``with_user``;
    ``env``: settings besides ``server_env``'s (``OLLAMA_HOST``, the backend mode)."""
    env = {**server_env(work, model_server, reply_max_tokens=reply_max_tokens), **(env or {})}
    python = sys.executable
    command = [python, str(ROOT / "manage.py")]
    subprocess.run([*command, "migrate", "--noinput"], env=env, check=True, capture_output=True)
    subprocess.run([*command, "collectstatic", "--noinput", "--verbosity", "0"], env=env, check=True)
    if with_user:
        create = (
            "from django.contrib.auth import get_user_model; "
            f"get_user_model().objects.create_user('{E2E_USERNAME}', password='{E2E_PASSWORD}')"
        )
        subprocess.run([*command, "shell", "-c", create], env=env, check=True)
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


def manage(work: Path, model_server: ModelServerProcess, *args: str) -> str:
    """A management command against the server's database (``serve(work, ...)``); what it printed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=server_env(work, model_server),
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout
