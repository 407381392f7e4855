"""A reply belongs to the session, not to the socket (chat/web/live.py): it outlives the page that asked
for it, a page opened meanwhile joins it, and Stop from any page of the session ends it."""

from __future__ import annotations

import asyncio
import html
import json
import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from chat.models import Checkpoint, Message, Session
from chat.services.messages import message_create
from chat.services.sessions import session_create
from chat.web.live import STILL_COMING, reply_in_flight
from tests.factories import SOCKET_TIMEOUT, frames_until, socket

pytestmark = pytest.mark.django_db(transaction=True)

# Long and slow: the reply is still streaming whatever the test does after its first delta.
LONG_REPLY = " ".join(f"Step {n} of the plan is checked and written down." for n in range(1, 16))
DELTA = '<div id="reply-1-body" hx-swap-oob="beforeend">'


@pytest.fixture
def slow_chat(user, use_gateway, fake_ollama):
    """A session on Ollama's stand-in, whose replies are LONG_REPLY streamed slowly."""
    from engine.llm.gateway import Gateway
    from engine.llm.ollama_backend import OllamaBackend
    from tests.support.model_server import SERVED_MODEL

    use_gateway(Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=60)))
    fake_ollama.behaviour.canned_reply = LONG_REPLY
    fake_ollama.behaviour.chunk_delay_seconds = 0.06
    return session_create(owner=user, model=SERVED_MODEL, context_size=4096)


async def connected(session: Session, user, query: str = "") -> WebsocketCommunicator:
    communicator = await socket(session.pk, user, query=query)
    assert (await communicator.connect())[0]
    return communicator


async def reply_ended(session: Session, fake_ollama) -> None:
    """Until the session's reply in flight, if any, has ended (stored, its last frame sent); what the
    test needed it slow for is done, so the rest of it streams at once."""
    await fast_forward(fake_ollama)
    live = reply_in_flight(session.pk)
    if live is not None and live.task is not None:
        await asyncio.wait_for(asyncio.shield(live.task), timeout=SOCKET_TIMEOUT)


async def fast_forward(fake_ollama) -> None:
    """The rest of the reply streams without a pause between its chunks."""
    await sync_to_async(setattr)(fake_ollama.behaviour, "chunk_delay_seconds", 0.0)


def deltas(frames: list[str]) -> str:
    pattern = re.compile(re.escape(DELTA) + "(.*?)</div>", re.S)
    return "".join(html.unescape(match) for frame in frames for match in pattern.findall(frame))


def caught_up_text(frame: str) -> str:
    match = re.search(r'<div class="body stream" id="reply-1-body">(.*?)</div>', frame, re.S)
    assert match, "the catch-up brings the reply so far"
    return html.unescape(match.group(1))


async def replies(session: Session) -> list[Message]:
    return [m async for m in Message.objects.filter(session=session, role="assistant").order_by("position")]


async def test_closing_the_page_does_not_stop_the_reply(slow_chat, user, fake_ollama):
    page = await connected(slow_chat, user)
    await page.send_to(text_data=json.dumps({"message": "Plan the pier."}))
    await frames_until(page, DELTA)
    await page.disconnect()
    assert reply_in_flight(slow_chat.pk) is not None, "the reply goes on without the page"
    await reply_ended(slow_chat, fake_ollama)
    (reply,) = await replies(slow_chat)
    assert reply.content == LONG_REPLY
    assert reply.done_reason != "cancelled"


async def test_a_page_opened_during_the_reply_is_caught_up_and_streams_the_rest(slow_chat, user, fake_ollama):
    first = await connected(slow_chat, user)
    await first.send_to(text_data=json.dumps({"message": "Plan the pier."}))
    await frames_until(first, DELTA)
    await frames_until(first, DELTA)  # some of the reply came before the second page opens
    second = await connected(slow_chat, user)
    frames = await frames_until(second, 'data-streaming="1"')
    catch_up = frames[-1]
    assert 'id="history" hx-swap-oob="true"' in catch_up
    assert "Plan the pier." in catch_up
    assert 'data-action="retry"' not in catch_up, "the question being answered offers no Retry"
    so_far = caught_up_text(catch_up)
    assert so_far
    assert LONG_REPLY.startswith(so_far)
    await fast_forward(fake_ollama)
    rest = await frames_until(second, 'id="context-meter"')
    await reply_ended(slow_chat, fake_ollama)
    (reply,) = await replies(slow_chat)
    assert so_far + deltas(rest) == reply.content == LONG_REPLY
    # Both pages swap the same element for the stored reply.
    assert f'id="msg-{reply.id}" hx-swap-oob="outerHTML:#reply-1"' in rest[-1]
    first_rest = await frames_until(first, 'id="context-meter"')
    assert f'id="msg-{reply.id}" hx-swap-oob="outerHTML:#reply-1"' in first_rest[-1]
    await first.disconnect()
    await second.disconnect()


async def test_stop_from_another_page_stops_the_reply(slow_chat, user, fake_ollama):
    first = await connected(slow_chat, user)
    second = await connected(slow_chat, user)
    await first.send_to(text_data=json.dumps({"message": "Plan the pier."}))
    await frames_until(second, DELTA)
    await second.send_to(text_data=json.dumps({"action": "stop"}))
    for page in (first, second):
        assert "Stopped." in (await frames_until(page, "Stopped."))[-1]
    await reply_ended(slow_chat, fake_ollama)
    (reply,) = await replies(slow_chat)
    assert reply.done_reason == "cancelled"
    assert LONG_REPLY.startswith(reply.content)
    assert reply.content != LONG_REPLY
    await first.disconnect()
    await second.disconnect()


async def test_a_second_turn_from_any_page_is_refused_while_the_reply_streams(slow_chat, user, fake_ollama):
    first = await connected(slow_chat, user)
    second = await connected(slow_chat, user)
    await first.send_to(text_data=json.dumps({"message": "Plan the pier."}))
    await frames_until(second, DELTA)
    await second.send_to(text_data=json.dumps({"message": "And the crane?"}))
    refused = await frames_until(second, 'class="status error"')
    assert html.escape(STILL_COMING, quote=False) in refused[-1]
    assert 'data-streaming="0"' not in refused[-1], "the page still waits for the reply"
    await reply_ended(slow_chat, fake_ollama)
    contents = [m.content async for m in Message.objects.filter(session=slow_chat).order_by("position")]
    assert contents == ["Plan the pier.", LONG_REPLY]
    await first.disconnect()
    await second.disconnect()


async def test_the_chat_page_shows_a_reply_in_progress_without_retry(slow_chat, user, fake_ollama):
    page = await connected(slow_chat, user)
    await page.send_to(text_data=json.dumps({"message": "Plan the pier."}))
    await frames_until(page, DELTA)

    def chat_page() -> str:
        client = Client()
        client.force_login(user)
        return client.get(f"/sessions/{slow_chat.pk}/").content.decode()

    rendered = await sync_to_async(chat_page)()
    assert f'ws-connect="/ws/sessions/{slow_chat.pk}/?live=1"' in rendered
    assert '<div id="turn-state" data-streaming="1" hidden>' in rendered
    assert 'id="reply-1"' in rendered
    assert LONG_REPLY.startswith(caught_up_text(rendered))
    assert 'data-action="retry"' not in rendered
    await reply_ended(slow_chat, fake_ollama)
    await page.disconnect()

    # Once it has ended, a page rendered during it gets the history and the idle state as its socket opens.
    late = await connected(slow_chat, user, "live=1")
    frames = [await late.receive_from(timeout=SOCKET_TIMEOUT), await late.receive_from(timeout=SOCKET_TIMEOUT)]
    (reply,) = await replies(slow_chat)
    assert 'id="history" hx-swap-oob="true"' in frames[0]
    assert f'id="msg-{reply.id}"' in frames[0]
    assert 'data-streaming="0"' in frames[1]
    await late.disconnect()


async def test_a_logout_closes_the_socket_and_the_reply_goes_on(slow_chat, user, fake_ollama):
    """The page's login ends: nothing more reaches its socket (4401), and the session's reply, which
    its other pages may still show, is finished and stored."""
    page = await connected(slow_chat, user)
    await page.send_to(text_data=json.dumps({"message": "Plan the pier."}))
    await frames_until(page, DELTA)
    cookie = dict(page.scope["headers"])[b"cookie"].decode()

    def log_out() -> None:
        client = Client()
        name, value = cookie.split("=", 1)
        client.cookies[name] = value
        assert client.post("/accounts/logout/").status_code in (200, 302)

    await sync_to_async(log_out)()
    output = await page.receive_output(timeout=SOCKET_TIMEOUT)
    while output["type"] != "websocket.close":  # deltas sent before the logout reached the socket
        output = await page.receive_output(timeout=SOCKET_TIMEOUT)
    assert output["code"] == 4401
    await reply_ended(slow_chat, fake_ollama)
    (reply,) = await replies(slow_chat)
    assert reply.content == LONG_REPLY
    await page.disconnect()


async def test_a_goal_set_anywhere_reaches_every_page_of_the_session(slow_chat, user, fake_ollama):
    from chat.services.goals import goal_create

    pages = [await connected(slow_chat, user), await connected(slow_chat, user)]
    await sync_to_async(goal_create)(session=slow_chat, description="Ship the <b>pier</b>")
    for page in pages:
        frame = (await frames_until(page, 'id="goals-panel"'))[-1]
        assert "Ship the &lt;b&gt;pier&lt;/b&gt;" in frame
        assert 'id="context-meter"' in frame
        await page.disconnect()


async def test_a_turn_through_the_api_reaches_the_open_pages(user, api, fake_ollama):
    from engine.llm.embedded import MODEL_NAME

    fake_ollama.behaviour.canned_reply = "Noted: <i>twelve</i> piles."
    session = await sync_to_async(session_create)(owner=user, model=MODEL_NAME, context_size=4096)
    page = await connected(session, user)

    def post() -> int:
        response = api.post(
            f"/api/sessions/{session.pk}/messages", {"content": "The pier has twelve piles."}, "application/json"
        )
        return int(response.status_code)

    assert await sync_to_async(post)() == 200
    # The turn's two messages are appended to what the page shows, not the history sent anew.
    frame = (await frames_until(page, 'id="history" hx-swap-oob="beforeend"'))[-1]
    assert 'id="history" hx-swap-oob="true"' not in frame
    assert "The pier has twelve piles." in frame
    assert "Noted: &lt;i&gt;twelve&lt;/i&gt; piles." in frame
    assert 'id="history-empty" hx-swap-oob="delete"' in frame, "the first messages replace the empty history's line"
    assert 'id="context-meter"' in frame
    first_reply = await Message.objects.filter(session=session, role="assistant").alast()
    assert first_reply is not None
    assert frame.count('data-action="regenerate"') == 1

    # The next turn: the reply before it comes again, without its Regenerate, in place of the one shown.
    assert await sync_to_async(post)() == 200
    frame = (await frames_until(page, 'id="history" hx-swap-oob="beforeend"'))[-1]
    await page.disconnect()
    earlier, appended = frame.split('id="history" hx-swap-oob="beforeend"', 1)
    assert f'id="msg-{first_reply.pk}" hx-swap-oob="outerHTML:#msg-{first_reply.pk}"' in earlier
    assert 'data-action="regenerate"' not in earlier
    assert 'data-action="regenerate"' in appended
    assert "history-empty" not in frame
    positions = re.findall(r'<span class="muted">#(\d+) ', appended)
    assert positions == ["3", "4"], positions


async def test_an_api_turn_whose_reply_sets_a_goal_brings_the_goals_panel_in_a_frame_of_its_own(user, api, fake_ollama):
    from engine.llm.embedded import MODEL_NAME

    fake_ollama.behaviour.canned_reply = "[GOAL] Rebuild the <b>pier</b>\nNoted."
    session = await sync_to_async(session_create)(owner=user, model=MODEL_NAME, context_size=4096)
    page = await connected(session, user)
    response = await sync_to_async(api.post)(
        f"/api/sessions/{session.pk}/messages", {"content": "Let us plan the pier."}, "application/json"
    )
    assert response.status_code == 200
    frames = await frames_until(page, 'id="history" hx-swap-oob="beforeend"')
    await page.disconnect()
    # The appended messages leave the goals panel alone (the user may be typing in its forms)...
    assert 'id="goals-panel"' not in frames[-1]
    # ...and the goal the reply set reaches the page in the goals' own frame, before them.
    assert any('id="goals-panel"' in f and "Rebuild the &lt;b&gt;pier&lt;/b&gt;" in f for f in frames[:-1])


async def test_messages_a_compression_moved_come_with_the_whole_history(user, fake_ollama):
    from chat.web.fragments import APPEND_AT_MOST, appended_groups
    from engine.llm.embedded import MODEL_NAME

    session = await sync_to_async(session_create)(owner=user, model=MODEL_NAME, context_size=4096)
    for number in range(4):
        await sync_to_async(message_create)(
            session=session, role="user" if number % 2 == 0 else "assistant", content=f"message {number + 1}"
        )
    appended = await sync_to_async(appended_groups)(session, after_position=2)
    assert appended is not None
    assert [m.position for m in appended["appended"]] == [3, 4]
    assert appended["previous"].position == 2
    assert appended["regenerable_id"] == appended["appended"][-1].pk
    # Compressed meanwhile: the page's groups change, so it gets the history whole.
    checkpoint = await Checkpoint.objects.acreate(
        session=session, number=1, first_position=1, last_position=3, summary="s", original_tokens=9, current_tokens=3
    )
    await Message.objects.filter(session=session, position__lte=3).aupdate(compressed_into=checkpoint)
    assert await sync_to_async(appended_groups)(session, after_position=2) is None
    # Too many to append, or a position the history does not have.
    for number in range(APPEND_AT_MOST + 1):
        await sync_to_async(message_create)(session=session, role="user", content=f"more {number}")
    assert await sync_to_async(appended_groups)(session, after_position=4) is None
    assert await sync_to_async(appended_groups)(session, after_position=999) is None


async def test_a_drop_in_retry_appends_only_its_reply_to_the_open_pages(user, api, fake_ollama):
    from engine.llm.embedded import MODEL_NAME

    session = await sync_to_async(session_create)(owner=user, model=MODEL_NAME, context_size=4096)
    page = await connected(session, user)
    body = json.dumps(
        {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Name a fruit."}], "stream": False}
    )

    def chat() -> int:
        response = api.post(
            "/ollama/api/chat", body, content_type="application/json", HTTP_X_OLLM_SESSION=str(session.pk)
        )
        return int(response.status_code)

    fake_ollama.behaviour.fail_status = 500
    assert await sync_to_async(chat)() in (502, 503)
    # No reply: the pages get the history whole, the message with its Retry.
    frame = (await frames_until(page, 'id="history" hx-swap-oob="true"'))[-1]
    assert 'data-action="retry"' in frame
    question = await Message.objects.aget(session=session, position=1)

    fake_ollama.reset()
    fake_ollama.behaviour.canned_reply = "A pear."
    assert await sync_to_async(chat)() == 200
    frame = (await frames_until(page, 'id="history" hx-swap-oob="beforeend"'))[-1]
    await page.disconnect()
    earlier, appended = frame.split('id="history" hx-swap-oob="beforeend"', 1)
    assert f'hx-swap-oob="outerHTML:#msg-{question.pk}"' in earlier, "the question comes again, answered"
    assert 'data-action="retry"' not in frame
    assert "A pear." in appended
    assert "Name a fruit." not in appended, "the stored question is not appended twice"
