"""A turn whose channel layer fails (Redis restarting, issue 49, item 0): it still stores the user's message
first and the reply, says in the log what failed, and never leaves the session refusing the next message
as "still coming" (a group_discard that failed at the end of a turn did, and the next message was lost)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from channels.layers import get_channel_layer

from chat.models import Message
from chat.services.sessions import session_create
from chat.web.live import STILL_COMING, reply_in_flight
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from ollm_site.asgi import application  # noqa: F401  loaded first: its set-up makes the layer and logging anew
from tests.factories import SOCKET_TIMEOUT, frames_until, socket
from tests.support.model_server import SERVED_MODEL

pytestmark = pytest.mark.django_db(transaction=True)
DONE = 'data-streaming="0"'


@pytest.fixture
def socket_session(user, use_gateway, fake_ollama):
    use_gateway(Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=60)))
    fake_ollama.behaviour.canned_reply = "A short answer."
    return session_create(owner=user, model=SERVED_MODEL, context_size=4096)


def _fail_on_reply_groups(monkeypatch, method: str) -> None:
    """The layer's ``method`` raises for the reply's own group, as a Redis that went away does."""
    layer = get_channel_layer()
    real = getattr(layer, method)

    async def failing(group: str, channel: str) -> None:
        if group.endswith("-reply"):
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        await real(group, channel)

    monkeypatch.setattr(layer, method, failing)


async def _turn(communicator, text: str) -> list[str]:
    await communicator.send_to(text_data=json.dumps({"message": text}))
    return await frames_until(communicator, DONE)


async def _ended(session_id) -> None:
    live = reply_in_flight(session_id)
    if live is not None and live.task is not None:
        await asyncio.wait_for(asyncio.shield(live.task), timeout=SOCKET_TIMEOUT)


async def test_a_turn_that_cannot_join_its_reply_group_still_stores_the_message_and_answers(
    socket_session, user, monkeypatch, caplog
):
    communicator = await socket(socket_session.pk, user)
    assert (await communicator.connect())[0]
    _fail_on_reply_groups(monkeypatch, "group_add")
    with caplog.at_level(logging.WARNING, logger="chat.web.live"):
        await _turn(communicator, "First?")
        await _ended(socket_session.pk)
    await communicator.disconnect()
    stored = [(m.role, m.content) async for m in Message.objects.filter(session=socket_session).order_by("position")]
    assert stored == [("user", "First?"), ("assistant", "A short answer.")]
    assert any("channel layer could not be reached" in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]


async def test_a_turn_whose_group_cannot_be_left_does_not_refuse_the_next_message(
    socket_session, user, monkeypatch, caplog
):
    communicator = await socket(socket_session.pk, user)
    assert (await communicator.connect())[0]
    _fail_on_reply_groups(monkeypatch, "group_discard")
    with caplog.at_level(logging.WARNING, logger="chat.web.live"):
        await _turn(communicator, "First?")
        await _ended(socket_session.pk)
        frames = await _turn(communicator, "Second?")
        await _ended(socket_session.pk)
    await communicator.disconnect()
    assert not any(STILL_COMING in frame for frame in frames)
    roles = [m.role async for m in Message.objects.filter(session=socket_session).order_by("position")]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert any("left no group" in r.getMessage() for r in caplog.records)


async def test_a_page_that_cannot_ask_for_the_reply_so_far_stays_open_and_chats(
    socket_session, user, monkeypatch, caplog
):
    # A page opening as Redis comes back (issue 49, item 0): the layer refuses the socket's join request to a
    # reply in flight after the socket was accepted. The page stays open, without the reply so far, and chats.
    layer = get_channel_layer()
    real = layer.group_send

    async def failing(group: str, message: dict[str, object]) -> None:
        if message.get("type") == "reply.join":
            raise ConnectionError("Connection closed by server.")
        await real(group, message)

    monkeypatch.setattr(layer, "group_send", failing)
    communicator = await socket(socket_session.pk, user)
    with caplog.at_level(logging.WARNING, logger="chat.web.consumers"):
        assert (await communicator.connect())[0]
        frames = await _turn(communicator, "First?")
        await _ended(socket_session.pk)
    await communicator.disconnect()
    assert any("A short answer." in frame for frame in frames)
    stored = [(m.role, m.content) async for m in Message.objects.filter(session=socket_session).order_by("position")]
    assert stored == [("user", "First?"), ("assistant", "A short answer.")]
    assert any("reply so far" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
