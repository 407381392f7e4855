from __future__ import annotations

import re

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from chat.models import EventType
from chat.services.events import event_record
from chat.web.channel_events import session_group

pytestmark = pytest.mark.django_db(transaction=True)


async def test_events_reach_the_sessions_group_after_commit(chat_session):
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(session_group(chat_session.pk), channel)
    event = await sync_to_async(event_record)(
        session=chat_session, type=EventType.COMPRESSION_SKIPPED, payload={"reason": "not needed"}
    )
    message = await layer.receive(channel)
    assert message["type"] == "context.event"
    assert message["event"]["id"] == event.id
    assert message["event"]["type"] == "compression-skipped"
    assert message["event"]["payload"] == {"reason": "not needed"}


async def test_an_event_rolled_back_is_never_published(chat_session):
    from django.db import transaction

    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(session_group(chat_session.pk), channel)

    def record_then_fail() -> None:
        with transaction.atomic():
            event_record(session=chat_session, type=EventType.COMPRESSED)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        await sync_to_async(record_then_fail)()
    await sync_to_async(event_record)(session=chat_session, type=EventType.CHECKPOINT_CREATED)
    message = await layer.receive(channel)
    assert message["event"]["type"] == "checkpoint-created"


async def test_a_compression_reports_its_progress_and_events_live(fake_ollama, user):
    from django.test import override_settings

    from chat.services.compression import compression_run
    from chat.services.messages import message_create
    from chat.services.sessions import session_create
    from engine.llm.gateway import Gateway
    from engine.llm.ollama_backend import OllamaBackend
    from tests.support.model_server import SERVED_MODEL

    fake_ollama.behaviour.canned_reply = "Short summary."
    gateway = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url))

    def build():
        with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES={SERVED_MODEL: {8192: 600}}):
            session = session_create(owner=user, model=SERVED_MODEL, context_size=8192)
        for index in range(10):
            message_create(session=session, role="user", content=f"q{index}")
            message_create(session=session, role="assistant", content="A fairly long answer here. " * 8)
        return session

    session = await sync_to_async(build)()
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(session_group(session.pk), channel)
    outcome = await sync_to_async(compression_run)(session_id=session.pk, gateway=gateway)
    assert outcome.status == "compressed"
    received = []
    while True:
        message = await layer.receive(channel)
        received.append(message)
        if message["type"] == "context.event" and message["event"]["type"] == "compressed":
            break
    lines = [m["text"] for m in received if m["type"] == "context.progress"]
    assert re.fullmatch(r"Compressing \d+ messages \([\d,]+ tokens\)…", lines[0])
    kinds = [m["event"]["type"] for m in received if m["type"] == "context.event"]
    assert kinds == ["auto-snapshot-created", "checkpoint-created", "compressed"]


async def test_a_compression_waiting_for_the_model_shows_as_queued(fake_ollama, user):
    """Behind a chat turn on a busy host, open pages read that the compression is queued, then that it runs."""
    import asyncio

    from django.test import override_settings

    from chat.services.compression import compression_run
    from chat.services.messages import message_create
    from chat.services.sessions import session_create
    from engine.llm.gateway import Gateway
    from engine.llm.ollama_backend import OllamaBackend
    from tests.factories import WRITER_SIZE_B
    from tests.support.model_server import SERVED_MODEL

    fake_ollama.behaviour.canned_reply = "Short summary."
    gateway = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url), max_wait=600)
    queue = gateway.hosts[0].queue

    def build():
        with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES={SERVED_MODEL: {8192: 600}}):
            # A model that is asked for its summary: a small one is asked for nothing, so never queued.
            session = session_create(owner=user, model=SERVED_MODEL, context_size=8192, parameter_size_b=WRITER_SIZE_B)
        for index in range(10):
            message_create(session=session, role="user", content=f"q{index}")
            message_create(session=session, role="assistant", content="A fairly long answer here. " * 8)
        return session

    session = await sync_to_async(build)()
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(session_group(session.pk), channel)
    async with queue.slot(background=False):  # someone's chat turn holds the host
        compressing = asyncio.ensure_future(
            sync_to_async(compression_run, thread_sensitive=False)(session_id=session.pk, gateway=gateway)
        )
        while queue.state().queued_background == 0:
            await asyncio.sleep(0.02)
    assert (await compressing).status == "compressed"
    lines = []
    while "Compression running on the model…" not in lines:
        message = await layer.receive(channel)
        if message["type"] == "context.progress":
            lines.append(message["text"])
    assert "Compression queued for the model: 1 request ahead (chat turns go first)…" in lines
    assert lines.index("Compression queued for the model: 1 request ahead (chat turns go first)…") < lines.index(
        "Compression running on the model…"
    )
