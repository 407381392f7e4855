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
