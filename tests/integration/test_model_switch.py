"""Issue 47, item 10: switching a session's model from the chat page, among the models served here. The
context is recounted for the new model's tokenizer (its messages and checkpoints) and window, the switch is
a ``model-switched`` event of the timeline, and the page's form is the owner's only, behind login and CSRF."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from chat.models import ContextEvent, Message, Session
from chat.selectors.context import session_context
from chat.selectors.presentation import describe_event
from chat.services.messages import message_create
from chat.services.model_switch import session_model_switch
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from engine.resources import TiktokenCounter
from tests.support.model_server import SERVED_MODEL

pytestmark = pytest.mark.django_db
TEXTS = [
    "The north pier rests on twelve oak piles; the load limit is 40 t.",
    "Noted: twelve piles, 40 t. Anything else about the pier?",
]


@pytest.fixture
def both(use_gateway, monkeypatch, embedded_backend, fake_ollama):
    """The bundled model and Ollama's stand-in, both served."""
    gateway = use_gateway(
        Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=fake_ollama.url, timeout=60))
    )
    monkeypatch.setattr("chat.services.model_switch.get_gateway", lambda: gateway)
    return gateway


@pytest.fixture
def estimated_session(user, both):
    """A session on Ollama's model whose messages were counted by the estimate."""
    session = session_create(owner=user, model=SERVED_MODEL, context_size=4096)
    for role, text in zip(("user", "assistant"), TEXTS, strict=True):
        message_create(session=session, role=role, content=text, counter=TiktokenCounter())
    return session


def test_a_switch_recounts_the_context_for_the_new_model_and_is_recorded(estimated_session, both):
    before = [m.tokens for m in Message.objects.filter(session=estimated_session).order_by("position")]
    switched = session_model_switch(session=estimated_session, model=EMBEDDED_MODEL, gateway=both)
    assert switched.model == EMBEDDED_MODEL
    stored = list(Message.objects.filter(session=estimated_session).order_by("position"))
    exact = both.token_counter(EMBEDDED_MODEL).count_all(TEXTS)
    assert [m.tokens for m in stored] == [c.tokens for c in exact], "counted by the bundled model's tokenizer"
    assert all(m.tokens_exact for m in stored)
    assert [m.tokens for m in stored] != before
    report = session_context(session=Session.objects.get(pk=estimated_session.pk))
    assert report.budget.max_tokens == switched.max_tokens
    (event,) = ContextEvent.objects.filter(session=estimated_session, type="model-switched")
    assert event.payload["from"] == SERVED_MODEL
    assert event.payload["to"] == EMBEDDED_MODEL
    assert event.payload["messages_recounted"] == 2
    assert event.payload["tokens_before"] == sum(before)
    assert event.payload["tokens_after"] == sum(c.tokens for c in exact)
    assert event.payload["max_tokens"] == switched.max_tokens
    line = describe_event(event.type, event.payload)
    assert line.startswith(f"Model switched from {SERVED_MODEL} to {EMBEDDED_MODEL}: the context recounted")


def test_the_same_model_or_one_not_served_is_refused(estimated_session, both):
    with pytest.raises(ValidationError, match="uses smollm2:135m already"):
        session_model_switch(session=estimated_session, model=SERVED_MODEL, gateway=both)
    with pytest.raises(ValidationError, match="llama9:70b is not served here; choose one of"):
        session_model_switch(session=estimated_session, model="llama9:70b", gateway=both)
    assert Session.objects.get(pk=estimated_session.pk).model == SERVED_MODEL
    assert not ContextEvent.objects.filter(session=estimated_session, type="model-switched").exists()


def test_the_page_switches_for_its_owner_only_with_csrf(estimated_session, both, user, other_user):
    url = f"/sessions/{estimated_session.pk}/model/switch/"
    assert Client().post(url, {"model": EMBEDDED_MODEL}).status_code == 302  # to the login page
    stranger = Client()
    stranger.force_login(other_user)
    assert stranger.post(url, {"model": EMBEDDED_MODEL}).status_code == 404
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(user)
    assert guarded.post(url, {"model": EMBEDDED_MODEL}).status_code == 403
    owner = Client()
    owner.force_login(user)
    page = owner.get(f"/sessions/{estimated_session.pk}/").content.decode()
    assert 'id="model-switch"' in page
    assert f'<option value="{EMBEDDED_MODEL}">' in page
    response = owner.post(url, {"model": EMBEDDED_MODEL}, follow=True)
    assert response.status_code == 200
    assert f"Switched from {SERVED_MODEL} to {EMBEDDED_MODEL}" in response.content.decode()
    assert Session.objects.get(pk=estimated_session.pk).model == EMBEDDED_MODEL
    refused = owner.post(url, {"model": "<b>nope</b>"}, follow=True).content.decode()
    assert "&lt;b&gt;nope&lt;/b&gt; is not served here" in refused
