from __future__ import annotations

import pytest

from tests.support.model_server import ModelServerProcess


@pytest.fixture(scope="session")
def model_server(tmp_path_factory):
    """The bundled model server, one supervised process (one loaded model) for the whole run:
    the embedded model and Ollama's stand-in. Its log is in the run's temporary folder."""
    server = ModelServerProcess(log=tmp_path_factory.mktemp("modelserver") / "modelserver.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def app_model_server(model_server):
    """The app's own gateway (``get_gateway``) reaches the tests' model server: the in-process
    suites (tests/integration, tests/spec) use it for every test."""
    from django.conf import settings

    from chat.gateway import get_gateway

    previous = settings.OLLM_MODEL_SERVER_URL
    settings.OLLM_MODEL_SERVER_URL = model_server.url
    get_gateway.cache_clear()
    yield model_server
    settings.OLLM_MODEL_SERVER_URL = previous
    get_gateway.cache_clear()


@pytest.fixture(scope="session")
def embedded_backend(model_server):
    """The embedded backend, as the app makes it: a client of the bundled model server."""
    from engine.llm.embedded import EmbeddedBackend

    return EmbeddedBackend(host=model_server.url, timeout=120)


@pytest.fixture
def fake_ollama(model_server):
    """The same server as Ollama's stand-in (model ``SERVED_MODEL``), behaving normally at the start."""
    model_server.reset()
    yield model_server
    model_server.reset()


@pytest.fixture
def gateway(fake_ollama):
    """A gateway to Ollama's stand-in, passed to what a test calls (no app code is patched)."""
    from engine.llm.gateway import Gateway
    from engine.llm.ollama_backend import OllamaBackend

    return Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=180))


@pytest.fixture(autouse=True)
def _cache_afresh():
    """What the cache counts (imports per minute) outlives a test's database: each test starts empty."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="pw-alice-123")


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="pw-bob-123")


@pytest.fixture
def chat_session(user):
    from chat.services.sessions import session_create

    return session_create(owner=user, model="llama3.2:3b", context_size=16384, system_prompt="You are helpful.")


@pytest.fixture(scope="session", autouse=True)
def _close_worker_thread_connections(django_db_setup, django_db_blocker):
    """Async tests reach the database from asgiref's worker thread, whose connection
    would otherwise still be open when the test database is dropped."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    with django_db_blocker.unblock():
        SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture(scope="session", autouse=True)
def celery_worker_when_brokered(request):
    """With a broker (``REDIS_URL`` set, as in the services pass of ``make test``), compressions
    are not run in-process: a real Celery worker consumes them from Redis, as in production.

    It runs in a thread of this process so the tests' LLM doubles reach it; the system tests
    (tests/system) start separate worker processes.
    """
    from django.conf import settings

    if settings.CELERY_TASK_ALWAYS_EAGER:
        yield None
        return
    from celery.contrib.testing.worker import start_worker

    from ollm_site.celery import app

    request.getfixturevalue("django_db_setup")  # the worker's connections go to the test database
    app.control.purge()  # tasks a previous, interrupted run left in the queue
    with start_worker(
        app, pool="threads", concurrency=2, perform_ping_check=False, loglevel="WARNING", shutdown_timeout=60
    ) as worker:
        yield worker
