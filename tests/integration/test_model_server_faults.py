"""``kill -9`` of the bundled model server: in the middle of a streamed reply and of a compression.

The server runs in a process of its own under a supervisor: the test process (the
web server and the worker here) must stay up, lose nothing, and work again once the
supervisor has started the server anew.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from chat.models import Checkpoint, ContextEvent, Message
from chat.services.compression import CompressionOutcome, compression_run
from chat.services.messages import message_create
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME
from tests.factories import LOGIN_ANSWER, WRITER_SIZE_B, frames_until, frozen, socket
from tests.support.timing import scaled, wait_until


@pytest.mark.django_db(transaction=True)
async def test_a_killed_model_server_fails_the_turn_keeps_the_message_and_retry_works(
    user, app_gateway, model_server, fake_ollama
):
    session = await sync_to_async(session_create)(owner=user, model=MODEL_NAME, context_size=2048)
    # A slow model, so the reply is surely mid-stream when the server dies.
    fake_ollama.behaviour.chunk_delay_seconds = 0.3
    communicator = await socket(session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"message": "Tell me about lighthouses."}))
    await frames_until(communicator, '<div id="reply-1-body" hx-swap-oob="beforeend">')
    killed = await asyncio.to_thread(model_server.kill_server)

    frames = await frames_until(communicator, 'class="status error"')
    assert "the bundled model server" in frames[-1]
    assert "broke off mid-reply" in frames[-1]
    assert 'value="retry"' in frames[-1]
    # The part of the reply that reached the page is kept, marked as cut (issue 49, item 5).
    stored = [m async for m in Message.objects.filter(session=session).order_by("position")]
    assert [m.content for m in stored][:1] == ["Tell me about lighthouses."]
    assert [(m.role, m.done_reason) for m in stored[1:]] == [("assistant", "error")]

    restarted = await asyncio.to_thread(model_server.wait_ready)
    assert restarted != killed
    await communicator.send_to(text_data=json.dumps({"action": "retry"}))
    await frames_until(communicator, 'id="context-meter"')  # the turn's last frame
    await communicator.disconnect()
    stored = [m async for m in Message.objects.filter(session=session).order_by("position")]
    # Retry answered the message once more, without storing it twice: a new version of the cut reply.
    assert [m.role for m in stored] == ["user", "assistant", "assistant"]
    assert stored[2].version_of_id == stored[1].pk
    assert stored[1].excluded_from_context


@pytest.mark.django_db(transaction=True)
def test_a_model_server_killed_mid_compression_changes_nothing_and_the_next_one_works(
    user, app_gateway, model_server, fake_ollama
):
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES={MODEL_NAME: {8192: 1200}}):
        session = session_create(
            owner=user,
            model=MODEL_NAME,
            context_size=8192,
            system_prompt="Be brief.",
            settings={"compression": {"summary_max_tokens": 48}},
            parameter_size_b=WRITER_SIZE_B,  # asked for its summary: a small model is asked for nothing
        )
    for index in range(18):
        message_create(session=session, role="user", content=f"Question {index} about logins?")
        message_create(session=session, role="assistant", content=LOGIN_ANSWER)
    gateway = app_gateway
    before = frozen(session)
    fake_ollama.hold()
    outcomes: list[CompressionOutcome] = []
    running = threading.Thread(
        target=lambda: outcomes.append(compression_run(session_id=session.pk, gateway=gateway)), daemon=True
    )
    running.start()
    wait_until(lambda: fake_ollama.behaviour.waiting, timeout=60, what="the summary request to reach the model")
    killed = model_server.kill_server()  # the hold dies with it: the new server holds nothing
    running.join(scaled(120))

    assert [o.status for o in outcomes] == ["error"]
    assert frozen(session) == before, "a compression cut off by the model server's death changed the session"
    failure = ContextEvent.objects.get(session=session, type="compression-error")
    assert "the bundled model server" in failure.payload["reason"]
    assert model_server.wait_ready() != killed
    assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
    assert Checkpoint.objects.filter(session=session).count() == 1
