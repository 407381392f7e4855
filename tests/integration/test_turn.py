"""One chat turn with the real embedded model."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from chat.models import Message, Session
from chat.services import message_create, message_leave_context
from chat.turn import turn_retry, turn_run
from contextmgr.llm.embedded import MODEL_NAME
from contextmgr.llm.types import ContextOverflow, LLMError, LLMTimeout, ModelNotFound
from contextmgr.models import Goal
from contextmgr.selectors import session_context
from contextmgr.services.goals import goal_create

pytestmark = pytest.mark.django_db(transaction=True)


@override_settings(OLLM_CHAT_TEMPERATURE=0.0, OLLM_REPLY_MAX_TOKENS=24)
async def test_a_turn_streams_and_stores_both_messages(small_session, embedded_gateway):
    deltas: list[str] = []

    async def collect(delta: str) -> None:
        deltas.append(delta)

    outcome = await turn_run(
        session_id=small_session.pk, content="What is a context window?", gateway=embedded_gateway, on_delta=collect
    )
    assert outcome.user_message.position == 1
    assert outcome.assistant_message.position == 2
    assert outcome.assistant_message.content == "".join(deltas)
    assert len(deltas) >= 2
    assert outcome.prompt_exact
    assert outcome.result.prompt_tokens == outcome.prompt_tokens
    assert outcome.assistant_message.tokens_exact
    assert outcome.assistant_message.done_reason in {"stop", "length"}
    assert outcome.cut_by_cap == (outcome.assistant_message.done_reason == "length")


@override_settings(OLLM_CHAT_TEMPERATURE=0.0, OLLM_REPLY_MAX_TOKENS=8)
async def test_markers_that_cannot_be_applied_do_not_fail_a_stored_reply(small_session, embedded_gateway, monkeypatch):
    def broken(**options):
        raise ValidationError({"description": "too long"})

    monkeypatch.setattr("chat.turn.goal_apply_markers", broken)
    outcome = await turn_run(session_id=small_session.pk, content="Say hello.", gateway=embedded_gateway)
    assert outcome.markers_applied == 0
    roles = [m.role async for m in Message.objects.filter(session=small_session).order_by("position")]
    assert roles == ["user", "assistant"]
    assert outcome.context.budget.active_tokens == outcome.user_message.tokens + outcome.assistant_message.tokens


@override_settings(OLLM_CHAT_TEMPERATURE=0.0, OLLM_REPLY_MAX_TOKENS=4)
async def test_a_reply_cut_by_the_cap_says_so(small_session, embedded_gateway):
    outcome = await turn_run(
        session_id=small_session.pk, content="Describe the history of Rome.", gateway=embedded_gateway
    )
    assert outcome.cut_by_cap
    assert outcome.result.completion_tokens == 4
    assert (await Message.objects.aget(pk=outcome.assistant_message.pk)).done_reason == "length"


async def test_with_compression_off_an_overflowing_message_is_refused_but_kept(user, embedded_gateway):
    session = await Session.objects.acreate(
        owner=user,
        title="t",
        model=MODEL_NAME,
        context_size=2048,
        max_tokens=1700,
        settings={"compression": {"enabled": False}},
    )
    earlier = await sync_to_async(message_create)(session=session, role="user", content="Please read this. " * 250)
    text = "And this too. " * 250  # fits alone, not beside the earlier message
    with pytest.raises(ContextOverflow, match="compression is turned off"):
        await turn_run(session_id=session.pk, content=text, gateway=embedded_gateway)
    assert [m.content async for m in Message.objects.filter(session=session)] == [earlier.content, text]


@override_settings(OLLM_CHAT_TEMPERATURE=0.0, OLLM_REPLY_MAX_TOKENS=16)
async def test_a_message_larger_than_the_context_is_kept_in_the_history_only(small_session, embedded_gateway):
    await turn_run(session_id=small_session.pk, content="Where do tides come from?", gateway=embedded_gateway)
    text = "A very long paste. " * 500
    with pytest.raises(ContextOverflow, match="Your message does not fit"):
        await turn_run(session_id=small_session.pk, content=text, gateway=embedded_gateway)
    refused = await Message.objects.aget(session=small_session, content=text)
    assert refused.excluded_from_context
    # Nothing was compressed in a hopeless attempt to make room for it.
    assert (await Session.objects.aget(pk=small_session.pk)).compression_count == 0
    with pytest.raises(ValidationError, match="kept in the history only"):
        await turn_retry(session_id=small_session.pk, gateway=embedded_gateway)

    outcome = await turn_run(session_id=small_session.pk, content="And what about waves?", gateway=embedded_gateway)
    assert outcome.prompt_tokens < 300  # the paste (about 2,500 tokens) is not in the prompt
    assert (await Session.objects.aget(pk=small_session.pk)).compression_count == 0
    assert await Message.objects.filter(session=small_session).acount() == 5


async def test_a_failed_compression_keeps_the_message_in_the_context(small_session, embedded_gateway, monkeypatch):
    await sync_to_async(message_create)(session=small_session, role="user", content="Some background. " * 250)
    # Only the turn's own attempts to make room run, and both fail.
    monkeypatch.setattr("chat.turn.compression_maybe_schedule", lambda **options: False)
    monkeypatch.setattr("chat.turn._compress_now", lambda **options: "error")
    text = "A long question. " * 300  # fits alone, not beside the background
    with pytest.raises(LLMError, match="the compression failed; your message is saved"):
        await turn_run(session_id=small_session.pk, content=text, gateway=embedded_gateway)
    stored = await Message.objects.aget(session=small_session, content=text)
    assert not stored.excluded_from_context  # Retry can still answer it


@override_settings(OLLM_COMPRESSION_WAIT_SECONDS=0.3)
async def test_a_turn_that_needs_room_waits_for_the_running_compression(small_session, embedded_gateway):
    await sync_to_async(message_create)(session=small_session, role="user", content="Some background. " * 250)
    await Session.objects.filter(pk=small_session.pk).aupdate(compression_started_at=timezone.now())
    text = "A long question. " * 300  # fits alone, not beside the background
    waits: list[str] = []

    async def on_wait(why: str) -> None:
        waits.append(why)

    with pytest.raises(LLMTimeout, match="still running; your message is saved"):
        await turn_run(session_id=small_session.pk, content=text, gateway=embedded_gateway, on_wait=on_wait)
    assert await Message.objects.filter(session=small_session, content=text).aexists()
    assert waits == ["waiting for the compression to finish…"], "said once, however long the wait"


async def test_an_unknown_model_keeps_the_message(user, embedded_gateway):
    session = await Session.objects.acreate(
        owner=user, title="t", model="mistral:7b", context_size=8192, max_tokens=6800
    )
    with pytest.raises(ModelNotFound):
        await turn_run(session_id=session.pk, content="hello?", gateway=embedded_gateway)
    stored = await Message.objects.aget(session=session)
    assert (stored.content, stored.tokens_exact) == ("hello?", False)


async def test_empty_input_stores_nothing(small_session, embedded_gateway):
    with pytest.raises(ValidationError, match="The message is empty"):
        await turn_run(session_id=small_session.pk, content="   ", gateway=embedded_gateway)
    assert not await Message.objects.filter(session=small_session).aexists()


def _fresh_context(session_id):
    return session_context(session=Session.objects.get(pk=session_id))


@override_settings(OLLM_CHAT_TEMPERATURE=0.0, OLLM_REPLY_MAX_TOKENS=12)
async def test_the_turns_context_is_what_a_fresh_read_finds(small_session, embedded_gateway):
    await sync_to_async(message_create)(session=small_session, role="user", content="Some background. " * 20)
    outcome = await turn_run(session_id=small_session.pk, content="What is a context window?", gateway=embedded_gateway)
    fresh = await sync_to_async(_fresh_context)(small_session.pk)
    assert outcome.context == fresh
    assert fresh.budget.active_tokens == sum([m.tokens async for m in Message.objects.filter(session=small_session)])


@override_settings(OLLM_CHAT_TEMPERATURE=0.0, OLLM_REPLY_MAX_TOKENS=12)
async def test_a_goal_set_while_the_reply_streams_shows_in_the_turns_context(small_session, embedded_gateway):
    async def set_goal(delta: str) -> None:
        if not await Goal.objects.filter(session=small_session).aexists():
            await sync_to_async(goal_create)(session=small_session, description="Ship the login form this week")

    outcome = await turn_run(session_id=small_session.pk, content="Hello.", gateway=embedded_gateway, on_delta=set_goal)
    assert outcome.context.goal_tokens > 0
    assert outcome.context == await sync_to_async(_fresh_context)(small_session.pk)


@override_settings(OLLM_CHAT_TEMPERATURE=0.0, OLLM_REPLY_MAX_TOKENS=12)
async def test_a_message_leaving_the_context_while_the_reply_streams_shows_in_the_turns_context(
    small_session, embedded_gateway
):
    earlier = await sync_to_async(message_create)(session=small_session, role="user", content="An aside. " * 30)

    async def drop_earlier(delta: str) -> None:
        if not (await Message.objects.aget(pk=earlier.pk)).excluded_from_context:
            await sync_to_async(message_leave_context)(message=earlier)

    outcome = await turn_run(
        session_id=small_session.pk, content="Hello.", gateway=embedded_gateway, on_delta=drop_earlier
    )
    assert outcome.context.budget.active_tokens == outcome.user_message.tokens + outcome.assistant_message.tokens
    assert outcome.context == await sync_to_async(_fresh_context)(small_session.pk)


@override_settings(OLLM_CHAT_TEMPERATURE=0.0, OLLM_REPLY_MAX_TOKENS=12)
async def test_a_context_size_changed_while_the_reply_streams_shows_in_the_turns_context(
    small_session, embedded_gateway
):
    async def resize(delta: str) -> None:
        await Session.objects.filter(pk=small_session.pk).aupdate(max_tokens=3000)

    outcome = await turn_run(session_id=small_session.pk, content="Hello.", gateway=embedded_gateway, on_delta=resize)
    assert outcome.context.budget.max_tokens == 3000
    assert outcome.context == await sync_to_async(_fresh_context)(small_session.pk)
