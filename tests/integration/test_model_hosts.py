"""The model hosts: one queue each (turns first, background work bounded behind them), and several
Ollama hosts that share the load and stand in for each other when one dies."""

from __future__ import annotations

import asyncio
import json

import pytest

from chat.models import Session
from engine.llm.gateway import Gateway
from engine.llm.hosts import HostQueue
from engine.llm.ollama_backend import OllamaBackend
from engine.llm.types import GREEDY, BackendUnavailable, ChatMessage, ChatRequest
from tests.support.model_server import SERVED_MODEL, ModelServerProcess
from tests.support.timing import scaled

HELLO = [ChatMessage("user", "Say hello.")]


async def _queued(queue: HostQueue, *, background: bool, order: list[str], name: str) -> None:
    async with queue.slot(background=background):
        order.append(name)


async def test_a_turn_goes_before_background_work_that_queued_first():
    queue = HostQueue(slots=1, max_wait=60)
    order: list[str] = []
    async with queue.slot(background=False):  # the host is busy
        summary = asyncio.create_task(_queued(queue, background=True, order=order, name="summary"))
        await asyncio.sleep(0)
        turn = asyncio.create_task(_queued(queue, background=False, order=order, name="turn"))
        while queue.state().queued_turns + queue.state().queued_background < 2:
            await asyncio.sleep(0.01)
    await asyncio.gather(summary, turn)
    assert order == ["turn", "summary"]
    assert queue.state().running == 0


async def test_background_work_waits_behind_a_turn_at_most_its_bound():
    queue = HostQueue(slots=1, max_wait=0.2)
    heard: list[int] = []

    async def on_queued(ahead: int) -> None:
        heard.append(ahead)

    # A turn that does not end while the summary waits: the summary runs beside it, once overdue.
    async with queue.slot(background=False), queue.slot(background=True, on_queued=on_queued) as waited:
        assert queue.state().running == 2
    assert waited >= 0.2
    assert heard == [1, 0]  # one ahead, then its turn
    assert queue.state().longest_background_wait >= 0.2


async def test_a_waiting_request_hears_its_place_every_tick_until_it_runs():
    """Issue 47, item 4: the queue tells a waiting request its place again every ``tick`` seconds, so a
    page can show its place and the time waited, live; then 0 once it runs."""
    queue = HostQueue(slots=1, max_wait=60, tick=0.05)
    heard: list[int] = []

    async def on_queued(ahead: int) -> None:
        heard.append(ahead)

    async def second() -> None:
        async with queue.slot(background=False, on_queued=on_queued):
            pass

    async with queue.slot(background=False):
        waiting = asyncio.create_task(second())
        while len(heard) < 4:
            await asyncio.sleep(0.01)
    await waiting
    assert heard[:4] == [1, 1, 1, 1]
    assert heard[-1] == 0
    assert set(heard[:-1]) == {1}


async def test_a_cancelled_wait_leaves_the_queue_as_it_was():
    queue = HostQueue(slots=1, max_wait=60)
    async with queue.slot(background=False):
        waiting = asyncio.create_task(_queued(queue, background=False, order=[], name="gone"))
        while queue.state().queued_turns == 0:
            await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert queue.state().queued_turns == 0
    async with queue.slot(background=False):
        assert queue.state().running == 1


@pytest.fixture(scope="module")
def second_host(tmp_path_factory):
    """A second Ollama stand-in, a process of its own that a test can stop and start again."""
    server = ModelServerProcess(log=tmp_path_factory.mktemp("second-host") / "modelserver.log").start()
    yield server
    server.stop()


@pytest.fixture
def two_hosts(fake_ollama, second_host):
    if second_host._process is None or second_host._process.poll() is not None:
        second_host.start()
    second_host.reset()
    return Gateway(
        mode="ollama",
        embedded=None,
        ollama=[OllamaBackend(host=fake_ollama.url, timeout=60), OllamaBackend(host=second_host.url, timeout=60)],
        retry_after=scaled(600),
    )


def _served_on(server: ModelServerProcess) -> int:
    return sum(1 for r in server.behaviour.requests if r["path"] == "/api/chat")


async def test_requests_go_to_the_least_busy_host(two_hosts, fake_ollama, second_host):
    """Two replies at once go to two hosts, not one after the other on the first."""
    replies = [
        two_hosts.complete(ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=1024, max_tokens=8, sampling=GREEDY))
        for _ in range(2)
    ]
    texts = [c.text for c in await asyncio.gather(*replies)]
    assert all(texts)
    assert (_served_on(fake_ollama), _served_on(second_host)) == (1, 1)


async def test_a_dead_host_is_marked_down_and_the_other_takes_over(two_hosts, fake_ollama, second_host):
    second_host.stop()
    # Two at once: the second goes to the dead host (the least busy), fails there, and is asked again on the other.
    replies = [
        two_hosts.complete(ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=1024, max_tokens=8, sampling=GREEDY))
        for _ in range(2)
    ]
    assert all(c.text for c in await asyncio.gather(*replies))
    assert _served_on(fake_ollama) == 2
    assert two_hosts.hosts[1].is_down()
    report = {r.url: r for r in await two_hosts.hosts_report()}
    dead = report[second_host.url]
    assert (dead.up, report[fake_ollama.url].up) == (False, True)
    assert dead.failures
    assert "not reachable" in dead.failures[0].error
    assert SERVED_MODEL in report[fake_ollama.url].models

    second_host.start()
    back = {r.url: r for r in await two_hosts.hosts_report()}[second_host.url]
    assert back.up
    assert SERVED_MODEL in back.models
    # Up again, and the least busy: the next request may go to it.
    assert not two_hosts.hosts[1].is_down()


async def test_with_every_host_down_the_error_says_so(fake_ollama, closed_port_url):
    gateway = Gateway(
        mode="ollama", embedded=None, ollama=[OllamaBackend(host=closed_port_url), OllamaBackend(host=closed_port_url)]
    )
    with pytest.raises(BackendUnavailable, match="not reachable"):
        await gateway.complete(ChatRequest(HELLO, model=SERVED_MODEL, num_ctx=1024, max_tokens=8))
    assert all(host.is_down() for host in gateway.hosts)


@pytest.mark.django_db(transaction=True)
def test_turns_go_on_while_a_host_dies_and_comes_back(api, use_gateway, two_hosts, fake_ollama, second_host, user):
    """A session is tied to no host: its turns go on, over the REST API, whichever host answers;
    /api/hosts (staff's) shows the dead one down with its failure, and up once it is back."""
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    use_gateway(two_hosts)
    asked = {"model": SERVED_MODEL, "context_size": 4096, "title": "hosts"}
    created = api.post("/api/sessions", asked, content_type="application/json")
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]

    def turn(text: str) -> None:
        answer = api.post(f"/api/sessions/{session_id}/messages", {"content": text}, content_type="application/json")
        assert answer.status_code == 200, answer.content

    turn("Name a color.")
    second_host.stop()
    turn("Name a fruit.")
    turn("Name an animal.")
    hosts = {h["url"]: h for h in api.get("/api/hosts").json()}
    assert hosts[second_host.url]["up"] is False
    assert hosts[fake_ollama.url]["up"] is True
    second_host.start()
    turn("Name a city.")
    hosts = {h["url"]: h for h in api.get("/api/hosts").json()}
    assert hosts[second_host.url]["up"] is True
    assert json.dumps(hosts)  # plain JSON throughout
    session = Session.objects.get(pk=session_id)
    assert session.messages.filter(role="assistant").count() == 4
    assert session.messages.filter(role="user").count() == 4


def test_the_hosts_need_a_login(client):
    assert client.get("/api/hosts").status_code == 401
