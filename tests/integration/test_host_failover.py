"""Failover during a reply (issue 49, item 5), on two Ollama stand-ins: a host that fails before the first
token is replaced by the next one that serves the model, unseen; one that fails after tokens reached the
client ends the reply with the API's error and the part kept, marked as cut; with every host down, staff
read each host tried and why, an ordinary user no host's URL; ``/api/hosts`` counts failures apart."""

from __future__ import annotations

import json
import logging

import pytest
from asgiref.sync import sync_to_async
from django.utils.html import escape

from chat.models import Message
from chat.services.sessions import session_create
from chat.services.turn import TurnRetry, turn_run
from chat.services.turn.take import REPLY_CUT
from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from engine.llm.types import GREEDY, ChatMessage, ChatRequest
from tests.factories import frames_until, socket
from tests.support.model_server import SERVED_MODEL, UNTAGGED_MODEL, ModelServerProcess
from tests.support.timing import scaled

HELLO = [ChatMessage("user", "Say hello and tell me about lighthouses.")]
JSON = "application/json"


@pytest.fixture(scope="module")
def second_host(tmp_path_factory):
    """A second Ollama stand-in, a process of its own."""
    server = ModelServerProcess(log=tmp_path_factory.mktemp("failover-host") / "modelserver.log").start()
    yield server
    server.stop()


@pytest.fixture
def two_hosts(fake_ollama, second_host):
    """The first stand-in is asked first (equally idle, listed first), the second takes over."""
    second_host.reset()
    yield Gateway(
        mode="ollama",
        embedded=None,
        ollama=[OllamaBackend(host=fake_ollama.url, timeout=60), OllamaBackend(host=second_host.url, timeout=60)],
        retry_after=scaled(600),
    )
    second_host.reset()


def _chats(server: ModelServerProcess) -> int:
    return sum(1 for r in server.behaviour.requests if r["path"] == "/api/chat")


def _request() -> ChatRequest:
    return ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=1024, max_tokens=24, sampling=GREEDY)


@pytest.mark.parametrize("failure", [{"drop_after_chunks": 0}, {"fail_status": 500}])
async def test_a_host_failing_before_the_first_token_is_replaced_unseen(two_hosts, fake_ollama, second_host, failure):
    for name, value in failure.items():
        setattr(fake_ollama.behaviour, name, value)
    stream = two_hosts.send(_request())
    deltas = [delta async for delta in stream]
    # The client sees one reply: the second host's, whole, as that host alone gives it.
    fake_ollama.reset()
    alone = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=second_host.url, timeout=60))
    assert "".join(deltas) == (await alone.complete(_request())).text
    assert stream.result is not None
    assert stream.result.done_reason in ("stop", "length")
    assert _chats(second_host) == 2
    first, second = two_hosts.hosts
    assert (first.served, first.failed, second.served, second.failed) == (0, 1, 1, 0)
    assert first.is_down()


@pytest.mark.django_db(transaction=True)
def test_a_host_failing_after_tokens_ends_the_reply_cut_and_retry_answers_again(
    api, use_gateway, two_hosts, fake_ollama, second_host, user, caplog
):
    use_gateway(two_hosts)
    created = api.post("/api/sessions", {"model": SERVED_MODEL, "context_size": 4096}, content_type=JSON)
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]
    fake_ollama.behaviour.chunk_delay_seconds = 0.05  # a token a chunk: the third chunk is never sent
    fake_ollama.behaviour.drop_after_chunks = 2
    with caplog.at_level(logging.WARNING, logger="engine.llm.gateway"):
        answer = api.post(
            f"/api/sessions/{session_id}/messages", {"content": "Tell me about lighthouses."}, content_type=JSON
        )
    assert answer.status_code == 502, answer.content
    detail = answer.json()["detail"]
    assert "broke off mid-reply" in detail
    assert "marked as cut" in detail
    assert "127.0.0.1" not in detail  # an ordinary user's answer names no host
    assert _chats(second_host) == 0  # no other host takes over a reply the client has begun to read
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(fake_ollama.url in text and "reached the client" in text for text in warned), warned

    stored = list(Message.objects.filter(session_id=session_id).order_by("position"))
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].done_reason == REPLY_CUT
    assert stored[1].content.strip()
    cut = stored[1]
    hosts = {h["url"]: h for h in _as_staff(api, user).get("/api/hosts").json()}
    assert (hosts[fake_ollama.url]["failed"], hosts[fake_ollama.url]["served"]) == (1, 0)

    # Retry answers the question again: a new version of the cut reply, which stays in the full history.
    fake_ollama.reset()
    outcome = turn_run(session_id=session_id, variant=TurnRetry(), gateway=two_hosts)
    assert outcome.user_message.pk == stored[0].pk
    assert outcome.assistant_message.version_of_id == cut.pk
    assert outcome.assistant_message.done_reason in ("stop", "length")
    cut.refresh_from_db()
    assert cut.excluded_from_context


def _as_staff(api, user):
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return api


@pytest.mark.django_db(transaction=True)
def test_with_every_host_failing_staff_read_each_host_and_users_none(
    api, use_gateway, two_hosts, fake_ollama, second_host, user
):
    use_gateway(two_hosts)
    created = api.post("/api/sessions", {"model": SERVED_MODEL, "context_size": 4096}, content_type=JSON)
    assert created.status_code == 201, created.content
    url = f"/api/sessions/{created.json()['id']}/messages"
    fake_ollama.behaviour.fail_status = 500
    second_host.behaviour.fail_status = 503

    refused = api.post(url, {"content": "Hello?"}, content_type=JSON)
    assert refused.status_code == 503, refused.content
    detail = refused.json()["detail"]
    assert f"model {SERVED_MODEL} is unavailable now" in detail
    assert "127.0.0.1" not in detail

    for host in two_hosts.hosts:
        host.mark_up()  # asked again at once
    refused = _as_staff(api, user).post(url, {"content": "Hello again?"}, content_type=JSON)
    assert refused.status_code == 503, refused.content
    detail = refused.json()["detail"]
    assert f"{fake_ollama.url}: Ollama refused the request (500)" in detail
    assert f"{second_host.url}: Ollama refused the request (503)" in detail
    assert Message.objects.filter(content__in=["Hello?", "Hello again?"]).count() == 2  # both stored


async def test_the_hosts_list_every_model_whatever_its_name(fake_ollama, embedded_backend, second_host):
    second_host.reset()
    gateway = Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=second_host.url, timeout=60))
    reports = {r.backend: r for r in await gateway.hosts_report()}
    everything = {EMBEDDED_MODEL, SERVED_MODEL, UNTAGGED_MODEL}
    assert set(reports["embedded"].models) == everything
    assert set(reports["ollama"].models) == everything


@pytest.mark.django_db(transaction=True)
async def test_a_reply_cut_off_on_the_chat_page_shows_its_part_with_its_badge_at_once(
    use_gateway, two_hosts, fake_ollama, user
):
    use_gateway(two_hosts)
    session = await sync_to_async(session_create)(owner=user, model=SERVED_MODEL, context_size=4096)
    fake_ollama.behaviour.chunk_delay_seconds = 0.05
    fake_ollama.behaviour.drop_after_chunks = 2
    page = await socket(session.pk, user)
    assert (await page.connect())[0]
    await page.send_to(text_data=json.dumps({"message": "Tell me about lighthouses."}))
    last = (await frames_until(page, 'class="status error"'))[-1]
    cut = await Message.objects.aget(session=session, role="assistant")
    assert cut.done_reason == REPLY_CUT
    # Without a reload: the part that came, as stored, with its badge, under the error and its Retry.
    assert "cut off: the model failed" in last
    assert escape(cut.content.strip()) in last
    assert 'value="retry"' in last
    await page.disconnect()
