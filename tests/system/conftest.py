"""The system layer: real daphne web processes, real Celery workers, PostgreSQL, Redis, and the
Ollama stand-in (in this process, answering with the real embedded model) as the LLM backend.

PostgreSQL is ``PG_TEST_URL`` (default ``postgres://postgres@127.0.0.1:5432/test``): the layer creates
a database of its own there (``ollm_system_<pid>``) and drops it at the end. Redis is
``REDIS_TEST_URL`` (default ``redis://127.0.0.1:6379/14``): that database number is flushed first.
When either does not answer, every test here is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis

from tests.factories import GREEDY_REPLIES, LEASE_SECONDS, SYSTEM_PASSWORD, SYSTEM_USERNAME, Stack, seed, stack_start
from tests.support.model_server import SERVED_MODEL, ModelServerProcess
from tests.system.support import PYTHON, ROOT, sql

PG_TEST_URL = os.environ.get("PG_TEST_URL", "postgres://postgres@127.0.0.1:5432/test")
REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/14")
SMALL_CONTEXT = {SERVED_MODEL: {"8192": 1200}}  # an 8K (Tier 2) session squeezed to 1,200 tokens


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
def llm(fake_llm: ModelServerProcess, fake_ollama: ModelServerProcess) -> ModelServerProcess:
    """The stand-in once the services answer, behaving normally at the start (and reset after,
    which lets held generations go too)."""
    return fake_ollama


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
            "OLLM_CONTEXT_DEFAULTS": json.dumps(GREEDY_REPLIES),
            "OLLM_REPLY_MAX_TOKENS": "6",
            "OLLM_MODEL_CONTEXT_OVERRIDES": json.dumps(SMALL_CONTEXT),
            "OLLM_COMPRESSION_LEASE_SECONDS": str(LEASE_SECONDS),
            "PYTHONUNBUFFERED": "1",
        }
    )
    manage = [PYTHON, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput"], env=env, check=True, capture_output=True, timeout=180)
    seed(env, {"user": SYSTEM_USERNAME, "password": SYSTEM_PASSWORD})
    return env


@pytest.fixture(scope="session")
def stack(base_env: dict[str, str], services: Services, logdir: Path) -> Iterator[Stack]:
    """Two daphne web processes and two Celery workers (prefork, one pool process each)."""
    redis.Redis.from_url(services.redis_url).flushdb()
    started = stack_start(base_env, logdir, name="main", webs=2, workers=2, pool="prefork")
    yield started
    started.stop()
