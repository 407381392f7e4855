from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from contextmgr.models import EventType
from contextmgr.services.events import event_record, session_group

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
