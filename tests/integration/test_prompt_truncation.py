"""Real Ollama's silent truncation, reproduced by the stand-in and caught by the app.

When a prompt is longer than the context Ollama allocated, Ollama drops its front and answers
200 with the post-truncation ``prompt_eval_count`` (ollama/ollama #3839, #8099, #17427, #17889);
it allocates 2,048 tokens when a request sends no ``num_ctx``, and may allocate less than asked.
The stand-in does all of that with ``ollama_overflow`` on; the tests drive it through the official
``ollama`` client, as the app's Ollama backend does.
"""

from __future__ import annotations

import ollama
import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from chat.models import Checkpoint, ContextEvent, Message, Session
from chat.selectors.context import session_budget
from chat.services.compression import compression_run
from chat.services.messages import message_create
from chat.services.turn import TurnSend, turn_take
from tests.factories import GREEDY_REPLIES, WRITER_SIZE_B, converse, small_session, until_due
from tests.support.model_server import SERVED_MODEL

SYSTEM = "You are the assistant of the Acme login project. The password hashing is argon2."
# About 25 tokens a sentence; repeated, a prompt of any size.
FILLER = "The handler validates the form, hashes the password and records the login in the audit log. "


def _client(server) -> ollama.Client:
    return ollama.Client(host=server.url)


def _long_prompt(sentences: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": FILLER * sentences},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Say OK."},
    ]


def _count(server, messages: list[dict[str, str]]) -> int:
    """The stand-in's exact count of the whole prompt, template included."""
    response = server._http.post("/api/tokenize", json={"model": SERVED_MODEL, "messages": messages})
    response.raise_for_status()
    return int(response.json()["count"])


def test_the_stand_in_drops_the_front_of_a_prompt_longer_than_num_ctx(fake_ollama):
    fake_ollama.behaviour.ollama_overflow = True
    messages = _long_prompt(60)
    whole = _count(fake_ollama, messages)
    assert whole > 1024
    reply = _client(fake_ollama).chat(
        model=SERVED_MODEL, messages=messages, options={"num_ctx": 1024, "num_predict": 4, "temperature": 0}
    )
    # No error: a reply, whose count is of what was left, at most half the context.
    assert reply.done
    assert 400 < (reply.prompt_eval_count or 0) <= 512, "about half the context, as Ollama reports"
    assert fake_ollama.behaviour.served[-1].prompt_tokens == reply.prompt_eval_count, "what the model evaluated"


def test_the_stand_in_allocates_2048_when_no_num_ctx_is_sent(fake_ollama):
    fake_ollama.behaviour.ollama_overflow = True
    messages = _long_prompt(100)
    assert _count(fake_ollama, messages) > 2048
    reply = _client(fake_ollama).chat(model=SERVED_MODEL, messages=messages, options={"num_predict": 4})
    assert 512 < (reply.prompt_eval_count or 0) <= 1024, "cut to half of the default 2,048"
    short = _long_prompt(10)
    fitting = _client(fake_ollama).chat(model=SERVED_MODEL, messages=short, options={"num_predict": 4})
    assert fitting.prompt_eval_count == _count(fake_ollama, short), "a prompt that fits is evaluated whole"


def test_the_stand_in_may_allocate_less_than_asked(fake_ollama):
    fake_ollama.behaviour.ollama_overflow = True
    fake_ollama.behaviour.allocated_ctx = 512
    messages = _long_prompt(30)
    whole = _count(fake_ollama, messages)
    assert 512 < whole < 4096
    reply = _client(fake_ollama).chat(
        model=SERVED_MODEL, messages=messages, options={"num_ctx": 4096, "num_predict": 4}
    )
    assert (reply.prompt_eval_count or 0) <= 256 < whole


def test_without_the_overflow_behaviour_the_bundled_server_refuses_instead(fake_ollama):
    with pytest.raises(ollama.ResponseError) as refused:
        _client(fake_ollama).chat(model=SERVED_MODEL, messages=_long_prompt(60), options={"num_ctx": 1024})
    assert refused.value.status_code == 413


@pytest.mark.django_db(transaction=True)
@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=8)
def test_a_truncated_turn_is_caught_recorded_and_the_next_prompt_fits(user, gateway, fake_ollama, client):
    session = small_session(user, system_prompt=SYSTEM)  # 16K squeezed to 1,500 tokens
    converse(session, 9)
    message_create(session=session, role="user", content="Question before the server shrinks?")
    sent_before = session_budget(session=session).used
    assert 600 < sent_before < session.max_tokens
    # Calibrated on a whole prompt first: what the factor is before the truncated reply.
    fake_ollama.behaviour.ollama_overflow = True
    async_to_sync(turn_take)(session_id=session.pk, variant=TurnSend("First, a turn that fits."), gateway=gateway)
    factor = gateway.calibration.factor(SERVED_MODEL)
    assert not ContextEvent.objects.filter(session=session, type="prompt-truncated").exists()

    # Ollama now allocates 700 tokens whatever num_ctx asks: the next prompt (about 1,000) loses its front.
    fake_ollama.behaviour.allocated_ctx = 700
    outcome = async_to_sync(turn_take)(session_id=session.pk, variant=TurnSend("And now?"), gateway=gateway)
    assert outcome.result.prompt_truncated
    assert outcome.result.prompt_tokens <= 350 < (outcome.result.sent_prompt_tokens or 0)
    assert gateway.calibration.factor(SERVED_MODEL) == factor, "the cut count teaches the calibration nothing"
    (event,) = ContextEvent.objects.filter(session=session, type="prompt-truncated")
    assert event.payload["reported_tokens"] == outcome.result.prompt_tokens
    assert event.payload["sent_tokens"] == outcome.result.sent_prompt_tokens
    assert event.payload["num_ctx"] == 1500
    session = Session.objects.get(pk=session.pk)
    assert (
        session.max_tokens
        == event.payload["max_tokens"]
        == max(outcome.result.prompt_tokens, session.system_prompt_tokens + 64)
    )
    assert outcome.context.budget.max_tokens == session.max_tokens, "the turn's meter reads the new size"

    # The page says so.
    client.force_login(user)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert "The model did not see the whole context" in page
    assert f"evaluated {outcome.result.prompt_tokens:,} of the about" in page

    # The next turn fits what the server holds: compressed first, evaluated whole, no new event.
    fake_ollama.behaviour.requests.clear()
    nxt = async_to_sync(turn_take)(session_id=session.pk, variant=TurnSend("Still there?"), gateway=gateway)
    assert not nxt.result.prompt_truncated
    assert nxt.prompt_tokens <= session.max_tokens
    assert ContextEvent.objects.filter(session=session, type="prompt-truncated").count() == 1
    chat_requests = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    assert chat_requests[-1]["options"]["num_ctx"] == session.max_tokens
    assert SYSTEM in chat_requests[-1]["messages"][0]["content"], "the system prompt is sent and now kept"


@pytest.mark.django_db
def test_a_summary_request_the_server_cut_fails_the_compression_and_changes_nothing(user, gateway, fake_ollama):
    session = small_session(user, system_prompt=SYSTEM, parameter_size_b=WRITER_SIZE_B)  # a model that is asked
    until_due(session)
    before = list(Message.objects.filter(session=session).values_list("id", "compressed_into_id"))
    fake_ollama.behaviour.ollama_overflow = True
    fake_ollama.behaviour.allocated_ctx = 300
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "error"
    assert "evaluated only" in outcome.reason
    assert list(Message.objects.filter(session=session).values_list("id", "compressed_into_id")) == before
    assert not Checkpoint.objects.filter(session=session).exists()
    event = ContextEvent.objects.get(session=session, type="compression-error")
    assert "allocated a smaller context" in event.payload["reason"]
