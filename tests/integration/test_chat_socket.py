"""The chat websocket, through the real ASGI stack (origin check, cookie auth, routing)."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings
from django.utils import timezone

from chat.models import Message, Session
from chat.services.messages import message_create
from chat.services.sessions import session_create
from chat.web.rendering import render_markdown
from engine.llm.embedded import MODEL_NAME
from tests.factories import GREEDY_REPLIES, SOCKET_TIMEOUT, frames_until, socket
from tests.support.timing import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def streamed_text(frames: list[str], reply_id: str) -> str:
    pattern = re.compile(rf'<div id="{reply_id}-body" hx-swap-oob="beforeend">(.*?)</div>', re.S)
    return "".join(html.unescape(match) for frame in frames for match in pattern.findall(frame))


async def test_anonymous_sockets_are_refused(small_session):
    communicator = await socket(small_session.pk)
    connected, code = await communicator.connect()
    assert (connected, code) == (False, 4401)
    await communicator.disconnect()  # the refused consumer still listens on the channel layer


async def test_another_users_session_is_refused(small_session, other_user):
    communicator = await socket(small_session.pk, other_user)
    connected, code = await communicator.connect()
    assert (connected, code) == (False, 4404)
    await communicator.disconnect()  # the refused consumer still listens on the channel layer


async def test_a_foreign_origin_is_refused(small_session, user):
    communicator = await socket(small_session.pk, user, origin=b"http://evil.example")
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()  # the refused consumer still listens on the channel layer


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=24)
async def test_a_reply_streams_in_order_and_is_stored(small_session, user, app_gateway):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"action": "send", "message": "What is a <b>context</b> window?"}))
    frames = await frames_until(communicator, 'hx-swap-oob="outerHTML:#reply-1"')
    await communicator.disconnect()

    user_message, reply = [m async for m in Message.objects.filter(session=small_session).order_by("position")]
    start = next(i for i, f in enumerate(frames) if f"msg-{user_message.id}" in f)
    deltas = [i for i, f in enumerate(frames) if f.startswith('<div id="reply-1-body" hx-swap-oob="beforeend">')]
    assert start < deltas[0]
    assert deltas == sorted(deltas)
    assert deltas[-1] < len(frames) - 1
    # The user's text is escaped in the fragment, never markup.
    assert "What is a &lt;b&gt;context&lt;/b&gt; window?" in frames[start]
    assert "<b>context</b>" not in frames[start]
    assert streamed_text(frames, "reply-1") == reply.content
    assert reply.role == "assistant"
    assert reply.done_reason in {"stop", "length"}
    # The last frame puts the stored reply where the streamed one was and brings the meter and
    # the panels in step; the history is not sent again (nothing else changed in it).
    assert f'id="msg-{reply.id}" hx-swap-oob="outerHTML:#reply-1"' in frames[-1]
    assert 'id="context-meter"' in frames[-1]
    assert 'id="history"' not in frames[-1]


async def fake_ollama_chat(user, use_gateway, fake_ollama) -> tuple[Session, WebsocketCommunicator]:
    """A session on the fake Ollama server (its behaviour scripts the replies) and a connected socket."""
    from engine.llm.gateway import Gateway
    from engine.llm.ollama_backend import OllamaBackend
    from tests.support.model_server import SERVED_MODEL

    use_gateway(Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=60)))
    session = await sync_to_async(session_create)(owner=user, model=SERVED_MODEL, context_size=4096)
    communicator = await socket(session.pk, user)
    assert (await communicator.connect())[0]
    return session, communicator


async def test_the_goals_panel_comes_with_the_turn_only_when_the_reply_changed_it(user, use_gateway, fake_ollama):
    """The panel is re-rendered at the end of a turn only when the reply's markers changed it (it holds
    forms the user may be typing in)."""
    _, communicator = await fake_ollama_chat(user, use_gateway, fake_ollama)
    fake_ollama.behaviour.canned_reply = "Sure, let us start with the login form."
    await communicator.send_to(text_data=json.dumps({"message": "Where do we start?"}))
    plain = (await frames_until(communicator, 'id="context-meter"'))[-1]
    fake_ollama.behaviour.canned_reply = "[GOAL] Ship the login form\nFirst the form, then the audit log."
    await communicator.send_to(text_data=json.dumps({"message": "Make that our goal."}))
    marked = (await frames_until(communicator, 'id="context-meter"'))[-1]
    await communicator.disconnect()
    assert 'id="goals-panel"' not in plain
    assert 'id="goals-panel" class="panel" hx-swap-oob="true"' in marked
    assert "Ship the login form" in marked


MARKDOWN_REPLY = (
    "## Steps\n\n1. Pour the **C35/45** mix\n2. Check `tide < 3.2 m`\n\n"
    "| part | length |\n|---|--:|\n| pier | 240 m |\n\n"
    "See [the plan](https://example.com/plan) <img src=x onerror=alert(1)>"
)


def message_body(html_text: str, message_id: int) -> str:
    match = re.search(rf'id="msg-{message_id}".*?<div class="body">(.*?)</div>', html_text, re.S)
    assert match, f"msg-{message_id} is not in the page"
    return match.group(1)


async def test_a_streamed_reply_ends_rendered_as_the_stored_one_is(user, use_gateway, fake_ollama):
    """The deltas carry the reply as text; the last frame swaps in the stored message, rendered as
    markdown exactly as the chat page renders it after a reload."""
    session, communicator = await fake_ollama_chat(user, use_gateway, fake_ollama)
    fake_ollama.behaviour.canned_reply = MARKDOWN_REPLY
    await communicator.send_to(text_data=json.dumps({"message": "How do we build the pier?"}))
    frames = await frames_until(communicator, 'id="context-meter"')
    await communicator.disconnect()
    reply = await Message.objects.filter(session=session, role="assistant").aget()
    assert reply.content == MARKDOWN_REPLY
    assert streamed_text(frames, "reply-1") == MARKDOWN_REPLY

    def chat_page() -> str:
        client = Client()
        client.force_login(user)
        return client.get(f"/sessions/{session.pk}/").content.decode()

    streamed = message_body(frames[-1], reply.id)
    stored = message_body(await sync_to_async(chat_page)(), reply.id)
    assert streamed == stored == render_markdown(reply.content)
    assert "<h2>Steps</h2>" in stored
    assert "<strong>C35/45</strong>" in stored
    assert "<code>tide &lt; 3.2 m</code>" in stored
    assert '<td style="text-align:right">240 m</td>' in stored
    assert '<a href="https://example.com/plan" rel="noopener noreferrer nofollow" target="_blank">' in stored
    assert "&lt;img src=x onerror=alert(1)&gt;" in stored
    assert "<img" not in stored


async def test_a_goal_set_elsewhere_while_the_reply_streams_comes_with_the_turn(user, use_gateway, fake_ollama):
    """Another tab sets a goal during the reply: the meter counts it and the goals panel shows it."""
    from chat.services.goals import goal_create

    session, communicator = await fake_ollama_chat(user, use_gateway, fake_ollama)
    fake_ollama.behaviour.canned_reply = "First the form, then the audit log, then the tests."
    fake_ollama.behaviour.chunk_delay_seconds = 0.2
    await communicator.send_to(text_data=json.dumps({"message": "Where do we start?"}))
    await frames_until(communicator, 'hx-swap-oob="beforeend"')  # the reply is streaming
    await sync_to_async(goal_create)(session=session, description="Ship the login form")
    done = (await frames_until(communicator, 'id="context-meter"'))[-1]
    await communicator.disconnect()
    assert 'id="goals-panel" class="panel" hx-swap-oob="true"' in done
    assert "Ship the login form" in done
    goal_tokens = re.search(r"pinned goal, decisions and artifacts (\d+)</li>", done)
    assert goal_tokens is not None
    assert int(goal_tokens.group(1)) > 0


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=48)
async def test_a_history_change_while_a_reply_streams_resends_the_history_at_its_end(small_session, user, app_gateway):
    from channels.layers import get_channel_layer

    from chat.web.channel_events import session_group

    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"message": "Name three colours."}))
    await frames_until(communicator, '<div id="reply-1-body" hx-swap-oob="beforeend">')
    # An event of the session (a snapshot taken elsewhere, say) reaches the page meanwhile: its line
    # comes at once, the history only at the end, not to disturb the streaming reply.
    event = {"id": 0, "type": "snapshot-created", "payload": {}, "created_at": timezone.now().isoformat()}
    await get_channel_layer().group_send(session_group(small_session.pk), {"type": "context.event", "event": event})
    during = await frames_until(communicator, 'hx-swap-oob="outerHTML:#reply-1"')  # the turn's last frame
    assert 'id="history" hx-swap-oob="true"' not in "".join(during), "the history waits for the reply's end"
    assert any('id="progress"' in frame for frame in during), "the event's line came at once"
    last = await communicator.receive_from(timeout=SOCKET_TIMEOUT)  # then the history, whole
    await communicator.disconnect()
    assert 'id="history" hx-swap-oob="true"' in last
    reply = await Message.objects.filter(session=small_session, role="assistant").alast()
    assert reply is not None
    assert f'id="msg-{reply.id}"' in last


@override_settings(OLLM_REPLY_MAX_TOKENS=400)
async def test_stop_cancels_the_reply_and_keeps_what_came(small_session, user, app_gateway, fake_ollama):
    # A slow model: the reply cannot end by itself before Stop arrives, however busy the machine.
    fake_ollama.behaviour.chunk_delay_seconds = 0.25
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"message": "Write a long story about a lighthouse keeper."}))
    await frames_until(communicator, '<div id="reply-1-body" hx-swap-oob="beforeend">')
    await communicator.send_to(text_data=json.dumps({"action": "stop"}))
    frames = await frames_until(communicator, "Stopped.")
    assert any("stopped" in f for f in frames)
    await communicator.disconnect()

    reply = await Message.objects.filter(session=small_session, role="assistant").alast()
    assert reply is not None
    assert reply.done_reason == "cancelled"
    assert 0 < reply.tokens < 400

    def ours():
        return [s for s in fake_ollama.behaviour.served if s.last_message.startswith("Write a long story")]

    served = await asyncio.to_thread(wait_until, ours, timeout=60, what="the server to end the generation")
    assert [s.done_reason for s in served] == ["cancelled"]


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        ("not json", "Frames must be JSON objects."),
        ("[1, 2]", "Frames must be JSON objects."),
        ('{"action": "dance"}', "Unknown action"),
        ('{"action": "send"}', "The message is empty."),
        ('{"message": 42}', "The message must be text."),
        (json.dumps({"message": "x" * 1_048_576}), "The message is too long"),
        (json.dumps({"message": "hi", "session": str(uuid.uuid4())}), "This socket belongs to another session."),
    ],
)
async def test_malformed_frames_get_an_error_and_the_socket_stays_usable(small_session, user, frame, error):
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=frame)
    reply = await communicator.receive_from(timeout=SOCKET_TIMEOUT)
    assert 'id="chat-status"' in reply
    assert html.escape(error, quote=False) in reply
    assert await Message.objects.filter(session=small_session).acount() == 0
    # Still open and answering: a stop with nothing running is accepted silently,
    # and the next bad frame gets its own error.
    await communicator.send_to(text_data=json.dumps({"action": "stop"}))
    await communicator.send_to(text_data="{")
    assert "Frames must be JSON objects." in await communicator.receive_from(timeout=SOCKET_TIMEOUT)
    await communicator.disconnect()


async def test_an_unreachable_backend_keeps_the_message_and_retry_does_not_duplicate_it(
    user, monkeypatch, closed_port_url
):
    from engine.llm.gateway import Gateway
    from engine.llm.ollama_backend import OllamaBackend

    gateway = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=closed_port_url, timeout=5))
    monkeypatch.setattr("chat.services.turn.take.get_gateway", lambda: gateway)
    session = await sync_to_async(session_create)(owner=user, model="llama3.2:3b", context_size=4096)
    communicator = await socket(session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"message": "Are you there?"}))
    frames = await frames_until(communicator, 'class="status error"')
    assert "not reachable" in frames[-1]
    assert 'value="retry"' in frames[-1]
    await communicator.send_to(text_data=json.dumps({"action": "retry"}))
    await frames_until(communicator, 'class="status error"')
    await communicator.disconnect()
    assert [m.content async for m in Message.objects.filter(session=session)] == ["Are you there?"]


@override_settings(
    OLLM_COMPRESSION_TURN_WAIT_SECONDS=1.0, OLLM_REPLY_MAX_TOKENS=8, OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES
)
async def test_a_turn_waiting_for_a_compression_says_so_instead_of_thinking(small_session, user, app_gateway):
    await sync_to_async(message_create)(session=small_session, role="user", content="Some background. " * 250)
    # A compression holds the session and does not end: the turn waits its fill, then makes room itself.
    await Session.objects.filter(pk=small_session.pk).aupdate(compression_started_at=timezone.now())
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"message": "A long question. " * 300}))
    frames = await frames_until(communicator, "waiting for the compression")
    assert '<span class="muted" id="reply-1-status">thinking…</span>' in "".join(frames[:-1])
    assert (
        '<span id="reply-1-status" class="muted" hx-swap-oob="true">waiting for the compression to finish…</span>'
        in frames[-1]
    )
    frames = await frames_until(communicator, "compressing extractively")
    assert (
        '<span id="reply-1-status" class="muted" hx-swap-oob="true">the compression is taking too long; '
        "compressing extractively to make room…</span>" in frames[-1]
    )
    frames = await frames_until(communicator, 'id="context-meter"')  # the turn's last frame
    assert 'class="status error"' not in "".join(frames)
    await communicator.disconnect()
    await _until_idle(small_session)


async def test_retry_without_an_unanswered_message_says_so(small_session, user):
    await sync_to_async(message_create)(session=small_session, role="user", content="q")
    await sync_to_async(message_create)(session=small_session, role="assistant", content="a")
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"action": "retry"}))
    assert "There is no unanswered message to retry." in await communicator.receive_from(timeout=SOCKET_TIMEOUT)
    await communicator.disconnect()


async def _compressible_session(user):
    session = await sync_to_async(session_create)(
        owner=user,
        model=MODEL_NAME,
        context_size=16384,
        settings={"compression": {"preserve_recent": 100, "summary_max_tokens": 48}},
    )
    for n in range(6):
        await sync_to_async(message_create)(session=session, role="user", content=f"Question {n}: how do tides work?")
        await sync_to_async(message_create)(
            session=session, role="assistant", content=f"Answer {n}: the moon's gravity pulls the oceans. " * 8
        )
    return session


async def _compress_now(session) -> None:
    from django.db import transaction

    from chat.services.compression import compression_schedule

    def schedule() -> None:
        with transaction.atomic():
            compression_schedule(session_id=session.pk, reason="test", force=True)

    await sync_to_async(schedule)()


async def _until_idle(session) -> None:
    """Until the compression has let go of the session (it may go on to a rollover after
    its events): its last writes must land before the test's database is emptied."""
    from chat.services.compression import compression_wait

    assert await compression_wait(session_id=session.pk, timeout=SOCKET_TIMEOUT), "the compression holds the session"


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES)
async def test_compression_progress_and_events_reach_the_page(user, app_gateway):
    session = await _compressible_session(user)
    communicator = await socket(session.pk, user)
    assert (await communicator.connect())[0]
    await _compress_now(session)
    frames = await frames_until(communicator, "Compression #1")
    assert any('id="progress"' in f and "Compressing" in f for f in frames)
    assert "compressed into checkpoint #1, level 3 (recent)" in frames[-1]
    assert "· 1 compression\n" in frames[-1]
    await communicator.disconnect()
    await _until_idle(session)


@pytest.mark.skipif(
    not os.environ.get("REDIS_URL"),
    reason="needs Redis: runs in the services pass of `make test` (REDIS_URL set, a Celery worker consuming)",
)
@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES)
async def test_a_brokered_compression_runs_in_the_celery_worker_and_reaches_the_page_through_redis(
    user, app_gateway, celery_worker_when_brokered
):
    from celery.signals import task_prerun
    from channels.layers import get_channel_layer
    from channels_redis.core import RedisChannelLayer

    assert isinstance(get_channel_layer(), RedisChannelLayer)
    runs: list[tuple[str, bool, str | None]] = []

    def record(task, **_) -> None:
        # delivery_info is filled in only for a task that came through the broker.
        runs.append((task.name, bool(task.request.is_eager), (task.request.delivery_info or {}).get("routing_key")))

    task_prerun.connect(record, weak=False)
    try:
        session = await _compressible_session(user)
        communicator = await socket(session.pk, user)
        assert (await communicator.connect())[0]
        await _compress_now(session)
        frames = await frames_until(communicator, "Compression #1")
        assert "compressed into checkpoint #1, level 3 (recent)" in frames[-1]
        await communicator.disconnect()
        await _until_idle(session)
    finally:
        task_prerun.disconnect(record)
    assert runs == [("chat.tasks.compress_session", False, "celery")]
    assert celery_worker_when_brokered is not None


async def test_a_message_too_long_for_the_context_is_kept_and_explained(user, app_gateway):
    session = await sync_to_async(session_create)(owner=user, model=MODEL_NAME, context_size=2048)
    communicator = await socket(session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"message": "harbour " * 2500}))
    frames = await frames_until(communicator, 'class="status error"')
    assert "Your message does not fit" in frames[-1]
    assert 'value="retry"' not in frames[-1]
    await communicator.disconnect()
    assert await Message.objects.filter(session=session, role="user").acount() == 1


async def test_regenerate_answers_again_and_keeps_the_old_reply_in_the_history(user, use_gateway, fake_ollama):
    session, communicator = await fake_ollama_chat(user, use_gateway, fake_ollama)
    fake_ollama.behaviour.canned_reply = "First answer."
    await communicator.send_to(text_data=json.dumps({"action": "send", "message": "Which pier?"}))
    await frames_until(communicator, 'data-streaming="0"')
    fake_ollama.behaviour.canned_reply = "Second answer."
    await communicator.send_to(text_data=json.dumps({"action": "regenerate"}))
    frames = await frames_until(communicator, 'data-streaming="0"')
    await communicator.disconnect()
    rows = [m async for m in Message.objects.filter(session=session).order_by("position")]
    assert [(m.role, m.content, m.excluded_from_context) for m in rows] == [
        ("user", "Which pier?", False),
        ("assistant", "First answer.", True),
        ("assistant", "Second answer.", False),
    ]
    assert 'data-action="regenerate"' in frames[-1], "the new reply can be regenerated in turn"
    # The old reply is out of the prompt: the second call saw the question only.
    chats = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    assert "First answer." not in json.dumps(chats[-1]["messages"])


async def test_continue_goes_on_with_a_reply_cut_at_the_cap_in_its_place(user, use_gateway, fake_ollama):
    """Continue (issue 47, item 5) is the drop-in endpoints' continuation (TurnContinue): the stored reply
    is the cut text and what followed, shown in the cut one's place (a version of it), with no Continue
    once it ended by itself."""
    session, communicator = await fake_ollama_chat(user, use_gateway, fake_ollama)
    await sync_to_async(message_create)(session=session, role="user", content="Write the loop.")
    cut = await sync_to_async(message_create)(
        session=session, role="assistant", content="for i in range(", done_reason="length"
    )
    fake_ollama.behaviour.canned_reply = "3):\n    print(i)"
    await communicator.send_to(text_data=json.dumps({"action": "continue"}))
    frames = await frames_until(communicator, 'data-streaming="0"')
    await communicator.disconnect()
    rows = [m async for m in Message.objects.filter(session=session).order_by("position")]
    assert [(m.role, m.content, m.excluded_from_context) for m in rows] == [
        ("user", "Write the loop.", False),
        ("assistant", "for i in range(", True),
        ("assistant", "for i in range(3):\n    print(i)", False),
    ]
    assert rows[2].version_of_id == cut.pk, "shown in the cut reply's place, behind its switcher"
    # The prompt ended with the cut reply, so the model went on from it.
    chats = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"]
    assert chats[-1]["messages"][-1] == {"role": "assistant", "content": "for i in range("}
    last = frames[-1]
    assert f'id="msg-{cut.pk}"' not in last, "the cut text is not shown twice"
    assert "print(i)" in last
    assert 'data-action="continue"' not in last, "a reply that ended by itself offers no Continue"


def test_continue_is_offered_only_on_the_latest_reply_cut_at_the_cap(client, user, small_session):
    message_create(session=small_session, role="user", content="Write the loop.")
    message_create(session=small_session, role="assistant", content="for i in", done_reason="length")
    client.force_login(user)
    page = client.get(f"/sessions/{small_session.pk}/").content.decode()
    assert page.count('data-action="continue"') == 1
    message_create(session=small_session, role="user", content="Thanks.")
    message_create(session=small_session, role="assistant", content="Welcome.", done_reason="stop")
    page = client.get(f"/sessions/{small_session.pk}/").content.decode()
    assert 'data-action="continue"' not in page


async def test_edit_replaces_the_message_and_what_followed_in_the_context_only(user, use_gateway, fake_ollama):
    session, communicator = await fake_ollama_chat(user, use_gateway, fake_ollama)
    fake_ollama.behaviour.canned_reply = "Noted."
    for text in ("The pier is 240 m.", "And the crane?"):
        await communicator.send_to(text_data=json.dumps({"action": "send", "message": text}))
        await frames_until(communicator, 'data-streaming="0"')
    first = await Message.objects.aget(session=session, position=1)
    edit = {"action": "edit", "message_id": first.pk, "message": "The pier is 260 m."}
    await communicator.send_to(text_data=json.dumps(edit))
    await frames_until(communicator, 'data-streaming="0"')
    await communicator.disconnect()
    rows = [
        (m.content, m.excluded_from_context) async for m in Message.objects.filter(session=session).order_by("position")
    ]
    assert rows == [
        ("The pier is 240 m.", True),
        ("Noted.", True),
        ("And the crane?", True),
        ("Noted.", True),
        ("The pier is 260 m.", False),
        ("Noted.", False),
    ]


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        ({"action": "regenerate"}, "Only the latest reply can be regenerated."),
        ({"action": "edit", "message": "x"}, "An edit names the message it replaces."),
        ({"action": "edit", "message_id": 999_999, "message": "x"}, "There is no such message in this session."),
    ],
)
async def test_regenerate_and_edit_refuse_what_they_cannot_do(small_session, user, frame, error):
    await sync_to_async(message_create)(session=small_session, role="user", content="unanswered")
    communicator = await socket(small_session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps(frame))
    assert error in html.unescape(await communicator.receive_from(timeout=SOCKET_TIMEOUT))
    await communicator.disconnect()
    assert await Message.objects.filter(session=small_session, excluded_from_context=True).acount() == 0


async def test_a_message_older_than_a_compression_cannot_be_edited(chat_session_with_checkpoint, user):
    session, question = chat_session_with_checkpoint
    communicator = await socket(session.pk, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"action": "edit", "message_id": question.pk, "message": "x"}))
    assert "older than the last compression" in await communicator.receive_from(timeout=SOCKET_TIMEOUT)
    await communicator.disconnect()
    assert await Message.objects.filter(session=session, excluded_from_context=True).acount() == 0


@pytest.fixture
def chat_session_with_checkpoint(user):
    from chat.services.checkpoints import CheckpointDraft, compression_commit

    session = session_create(owner=user, model="llama3.2:3b", context_size=16384)
    question = message_create(session=session, role="user", content="q1")
    reply = message_create(session=session, role="assistant", content="a1 " * 40)
    message_create(session=session, role="user", content="q2")
    compression_commit(session=session, message_ids=[reply.id], draft=CheckpointDraft(summary="a1"))
    return session, question
