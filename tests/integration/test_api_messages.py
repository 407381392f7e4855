"""Chat turns over the API with the real embedded model, and compressions they trigger."""

from __future__ import annotations

import time

import pytest
from django.test import AsyncClient, override_settings

from chat.models import ContextEvent, Message
from chat.selectors.context import session_budget
from chat.services.messages import message_create
from chat.services.revisions import message_leave_context
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME
from tests.factories import GREEDY_REPLIES

pytestmark = pytest.mark.django_db(transaction=True)
JSON = "application/json"
QUIET = {"compression": {"summary_max_tokens": 48}, "snapshots": {"auto_create": False}}


@pytest.fixture
def small_session_settings():
    """``small_session`` (tests/integration/conftest.py) without auto-snapshots, with short summaries."""
    return QUIET


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=16)
def test_a_turn_stores_both_messages_and_returns_the_context(api, small_session):
    response = api.post(
        f"/api/sessions/{small_session.id}/messages", {"content": "What is a context window?"}, content_type=JSON
    )
    assert response.status_code == 200
    body = response.json()
    user_message, reply = body["user_message"], body["assistant_message"]
    assert (user_message["role"], user_message["content"], user_message["position"]) == (
        "user",
        "What is a context window?",
        1,
    )
    assert (reply["role"], reply["position"]) == ("assistant", 2)
    assert reply["content"].strip()
    assert reply["done_reason"] in {"stop", "length"}
    assert user_message["tokens_exact"]
    assert reply["tokens_exact"]
    assert body["prompt_exact"] is True
    assert body["compression_running"] is False
    assert body["context"]["message_tokens"] == user_message["tokens"] + reply["tokens"]
    assert body["context"]["max_tokens"] == 1700
    # The turn's own reading of the context is the one the context endpoint gives now.
    assert body["context"] == api.get(f"/api/sessions/{small_session.id}/context").json()
    stored = list(Message.objects.filter(session=small_session).values_list("id", "content"))
    assert stored == [(user_message["id"], "What is a context window?"), (reply["id"], reply["content"])]


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=8)
def test_a_message_taken_out_of_the_context_during_the_turn_is_answered_as_it_is_stored(
    api, small_session, monkeypatch
):
    """Something else changes the context while the reply streams (here the user's message leaves
    it, as a restore in another tab would): the answer is the stored state, not the turn's."""
    from chat.services.turn import take

    after_reply = take._after_reply

    def leave_then_store(session, *args, **kwargs):
        message_leave_context(message=Message.objects.get(session=small_session, role="user"))
        return after_reply(session, *args, **kwargs)

    monkeypatch.setattr(take, "_after_reply", leave_then_store)
    response = api.post(f"/api/sessions/{small_session.id}/messages", {"content": "Say hello."}, content_type=JSON)
    assert response.status_code == 200
    body = response.json()
    assert body["user_message"]["in_active_context"] is False
    assert body["assistant_message"]["in_active_context"] is True
    assert body["context"]["message_tokens"] == body["assistant_message"]["tokens"]
    assert body["context"] == api.get(f"/api/sessions/{small_session.id}/context").json()


def test_a_message_too_long_for_the_context_is_413_and_still_stored(api, small_session):
    text = "A very long paste. " * 500
    response = api.post(f"/api/sessions/{small_session.id}/messages", {"content": text}, content_type=JSON)
    assert response.status_code == 413
    detail = response.json()["detail"]
    assert "does not fit" in detail
    assert "kept in the full history but left out of the context" in detail
    assert list(Message.objects.filter(session=small_session).values_list("role", "content")) == [("user", text)]


def test_an_empty_or_missing_message_is_422_and_stores_nothing(api, small_session):
    empty = api.post(f"/api/sessions/{small_session.id}/messages", {"content": "  \n "}, content_type=JSON)
    assert empty.status_code == 422
    assert empty.json() == {"detail": "The message is empty."}
    assert api.post(f"/api/sessions/{small_session.id}/messages", {}, content_type=JSON).status_code == 422
    assert not Message.objects.exists()


def test_when_no_backend_answers_the_turn_is_503_and_the_message_stays(api, user):
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192)
    response = api.post(f"/api/sessions/{session.id}/messages", {"content": "Anyone there?"}, content_type=JSON)
    assert response.status_code == 503
    assert "not reachable" in response.json()["detail"]
    assert list(Message.objects.filter(session=session).values_list("content", flat=True)) == ["Anyone there?"]


# A 600-token context keeps the model's prompts, and so the test, short.
@override_settings(
    OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES,
    OLLM_REPLY_MAX_TOKENS=8,
    OLLM_MODEL_CONTEXT_OVERRIDES={MODEL_NAME: {2048: 600}},
)
def test_wait_compression_returns_after_the_triggered_compression(api, user):
    small_session = session_create(owner=user, model=MODEL_NAME, context_size=2048, settings=QUIET)
    assert small_session.max_tokens == 600
    trigger_at = session_budget(session=small_session).trigger_at
    n = 0
    while session_budget(session=small_session).active_tokens < trigger_at:
        message_create(
            session=small_session, role="assistant", content=f"Note {n}: the schema has users and orders. " * 4
        )
        n += 1
    response = api.post(
        f"/api/sessions/{small_session.id}/messages?wait_compression=true",
        {"content": "Summarize the schema."},
        content_type=JSON,
    )
    assert response.status_code == 200
    body = response.json()
    assert body["compression_running"] is False
    # Tier 1 rolls over: the old notes now sit behind one ultra checkpoint.
    assert body["context"]["compression_count"] == 1
    assert body["context"]["checkpoint_tokens"] > 0
    assert body["context"]["message_tokens"] < trigger_at
    assert ContextEvent.objects.filter(session=small_session, type="rollover-complete").exists()


def test_compress_without_wait_is_202_with_the_event_to_follow(api, small_session):
    message_create(session=small_session, role="user", content="Only one message")
    before = ContextEvent.objects.create(session=small_session, type="snapshot-created", payload={})
    response = api.post(f"/api/sessions/{small_session.id}/compress")
    assert response.status_code == 202
    assert response.json() == {"status": "scheduled", "event_id": before.id}
    deadline = time.monotonic() + 60
    while not (events := api.get(f"/api/sessions/{small_session.id}/events?after={before.id}").json()["items"]):
        assert time.monotonic() < deadline, "the scheduled compression recorded no outcome"
        time.sleep(0.1)
    # Forced, but the newest message alone cannot be rolled over: the outcome says why.
    assert [e["type"] for e in events] == ["compression-skipped"]
    assert events[0]["payload"]["reason"].startswith("nothing to roll over")


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=4)
async def test_a_turn_works_under_asgi_as_daphne_serves_it(api_token, api_gateway, small_session):
    """The view is sync and runs the async turn itself; under ASGI it runs in a worker thread."""
    response = await AsyncClient().post(
        f"/api/sessions/{small_session.id}/messages",
        {"content": "Hello"},
        content_type=JSON,
        headers={"Authorization": f"Bearer {api_token}"},
    )
    assert response.status_code == 200
    assert response.json()["assistant_message"]["position"] == 2
    assert await Message.objects.filter(session=small_session).acount() == 2
