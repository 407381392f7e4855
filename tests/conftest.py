from __future__ import annotations

import pytest


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="pw-alice-123")


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="pw-bob-123")


@pytest.fixture
def chat_session(user):
    from chat.services import session_create

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
