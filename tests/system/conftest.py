"""The system layer: real daphne web processes, real Celery workers, PostgreSQL, Redis, and the
Ollama stand-in (in this process, answering with the real embedded model) as the LLM backend.

PostgreSQL is ``PG_TEST_URL`` (default ``postgres://postgres@127.0.0.1:5432/test``): the layer creates
a database of its own there (``ollm_system_<pid>``) and drops it at the end. Redis is
``REDIS_TEST_URL`` (default ``redis://127.0.0.1:6379/14``): that database number is flushed first.
When either does not answer, every test here is skipped with the reason.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
import redis

from tests.support.model_server import SERVED_MODEL, ModelServerProcess
from tests.system.support import (
    PYTHON,
    ROOT,
    Proc,
    sql,
    start_daphne,
    start_worker,
    wait_daphne,
    wait_worker,
)

PG_TEST_URL = os.environ.get("PG_TEST_URL", "postgres://postgres@127.0.0.1:5432/test")
REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/14")
USERNAME, PASSWORD = "system-user", "system-pass-5521"
# A compression lease lives this long without a heartbeat: a killed worker's lease frees itself quickly.
LEASE_SECONDS = 6
SMALL_CONTEXT = {SERVED_MODEL: {"8192": 1200}}  # an 8K (Tier 2) session squeezed to 1,200 tokens
ANSWER = (
    "The handler validates the form, hashes the password with argon2 and compares it in constant time. "
    "It then issues a short-lived token and records the login in the audit log for later review. "
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.system)


@pytest.fixture(scope="session")
def django_db_setup() -> None:
    """The system tests never touch pytest-django's test database: their processes use their own."""


@dataclass(frozen=True)
class Services:
    pg_url: str
    redis_url: str


@pytest.fixture(scope="session")
def services() -> Services:
    """PostgreSQL and Redis, or a skip that says which one does not answer."""
    try:
        psycopg.connect(PG_TEST_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL does not answer at {PG_TEST_URL} (set PG_TEST_URL): {exc}".strip())
    try:
        redis.Redis.from_url(REDIS_TEST_URL, socket_timeout=3, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis does not answer at {REDIS_TEST_URL} (set REDIS_TEST_URL): {exc}")
    return Services(PG_TEST_URL, REDIS_TEST_URL)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def with_redis_db(url: str, number: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{number}"))


@pytest.fixture(scope="session")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("system")


@pytest.fixture(scope="session")
def fake_llm(services: Services, model_server: ModelServerProcess) -> ModelServerProcess:
    return model_server


@pytest.fixture
def llm(fake_llm: ModelServerProcess) -> Iterator[ModelServerProcess]:
    fake_llm.reset()
    yield fake_llm
    fake_llm.reset()  # lets held generations go too


@pytest.fixture(scope="session")
def system_db(services: Services) -> Iterator[str]:
    """A database of this run's own on the PostgreSQL server, migrated; dropped at the end."""
    name = f"ollm_system_{os.getpid()}"
    sql(services.pg_url, f'DROP DATABASE IF EXISTS "{name}"')
    sql(services.pg_url, f'CREATE DATABASE "{name}"')
    dsn = with_database(services.pg_url, name)
    yield dsn
    sql(services.pg_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def base_env(services: Services, system_db: str, fake_llm: ModelServerProcess, logdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "ollm_site.settings",
            "OLLM_ENV_FILE": str(logdir / "none.env"),
            "SECRET_KEY": "system-tests-only-secret-key-0123456789-abcdefghijklmnop",
            "DATABASE_URL": system_db,
            "REDIS_URL": services.redis_url,
            "OLLM_LLM_BACKEND": "ollama",
            "OLLAMA_HOST": fake_llm.url,
            # Fifty replies queue for the one model of the stand-in: the last waits a minute or more.
            "OLLAMA_TIMEOUT": "300",
            "OLLM_CHAT_TEMPERATURE": "0",
            "OLLM_REPLY_MAX_TOKENS": "6",
            "OLLM_MODEL_CONTEXT_OVERRIDES": json.dumps(SMALL_CONTEXT),
            "OLLM_COMPRESSION_LEASE_SECONDS": str(LEASE_SECONDS),
            "PYTHONUNBUFFERED": "1",
        }
    )
    manage = [PYTHON, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True, capture_output=True, timeout=180)
    seed(env, {"user": USERNAME, "password": PASSWORD})
    return env


def seed(env: dict[str, str], order: dict[str, object]) -> dict[str, Any]:
    done = subprocess.run(
        [PYTHON, "-m", "tests.system.seed", json.dumps(order)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def login(base_url: str) -> str:
    """Log in through the login form; the ``Cookie`` header value (session and CSRF cookies)."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        client.get("/accounts/login/").raise_for_status()
        answer = client.post(
            "/accounts/login/",
            data={"username": USERNAME, "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"]},
        )
        assert answer.status_code == 302, answer.text[:500]
        return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


@dataclass
class Stack:
    """Web processes and workers sharing one database and one Redis."""

    env: dict[str, str]
    logdir: Path
    webs: list[tuple[Proc, int]] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    cookie: str = ""

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.webs[index][1]}"

    def ws_url(self, index: int, session_id: str) -> str:
        return f"ws://127.0.0.1:{self.webs[index][1]}/ws/sessions/{session_id}/"

    def csrf(self) -> str:
        return dict(part.split("=", 1) for part in self.cookie.split("; "))["csrftoken"]

    def post(self, index: int, path: str) -> httpx.Response:
        return httpx.post(
            self.url(index) + path,
            headers={"Cookie": self.cookie, "X-CSRFToken": self.csrf(), "Referer": self.url(index) + "/"},
            timeout=30,
        )

    def new_session(self, **spec: object) -> str:
        return self.new_sessions(1, **spec)[0]

    def new_sessions(self, count: int, **spec: object) -> list[str]:
        order = {"owner": USERNAME, "model": SERVED_MODEL, "context_size": 4096, "count": count, **spec}
        ids: list[str] = seed(self.env, {"session": order})["ids"]
        return ids

    def due_session(self, **spec: object) -> str:
        """A session whose active conversation has reached its compression trigger."""
        order: dict[str, object] = {
            "context_size": 8192,
            "pairs": 18,
            "answer": ANSWER,
            "settings": {"compression": {"summary_max_tokens": 48}},
        }
        return self.new_session(**{**order, **spec})

    def add_worker(self, name: str, *, pool: str = "prefork", env: dict[str, str] | None = None) -> Proc:
        worker = start_worker(name, env or self.env, self.logdir, pool=pool)
        self.workers.append(worker)
        wait_worker(worker)
        return worker

    def stop(self) -> None:
        for proc in [w for w, _ in self.webs] + self.workers:
            proc.stop()


def stack_start(env: dict[str, str], logdir: Path, *, name: str, webs: int, workers: int, pool: str) -> Stack:
    stack = Stack(env, logdir)
    stack.webs = [start_daphne(f"{name}-web{i + 1}", env, logdir) for i in range(webs)]
    stack.workers = [start_worker(f"{name}-worker{i + 1}", env, logdir, pool=pool) for i in range(workers)]
    try:
        with concurrent.futures.ThreadPoolExecutor() as pool_:
            waits = [pool_.submit(wait_daphne, proc, port) for proc, port in stack.webs]
            waits += [pool_.submit(wait_worker, proc) for proc in stack.workers]
            for wait in waits:
                wait.result()
        if stack.webs:
            stack.cookie = login(stack.url(0))
    except BaseException:
        stack.stop()
        raise
    return stack


@pytest.fixture(scope="session")
def stack(base_env: dict[str, str], services: Services, logdir: Path) -> Iterator[Stack]:
    """Two daphne web processes and two Celery workers (prefork, one pool process each)."""
    redis.Redis.from_url(services.redis_url).flushdb()
    started = stack_start(base_env, logdir, name="main", webs=2, workers=2, pool="prefork")
    yield started
    started.stop()
