"""Faults under real processes: the LLM backend dying mid-reply, Redis restarting during a chat,
the database going away in the middle of a compression."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery

from chat.web.live import STILL_COMING
from tests.factories import LEASE_SECONDS, TURN_SECONDS, Stack, chat, held_generation, outcomes, stack_start
from tests.support.timing import wait_until
from tests.system.support import (
    Proc,
    TcpProxy,
    WebSocket,
    event_types,
    lease_held,
    redis_server,
    session_state,
    sql,
    start_worker,
    wait_worker,
)


def history(dsn: str, session_id: str) -> list[tuple[str, str]]:
    return [
        (r[0], r[1])
        for r in sql(
            dsn, "SELECT role, content FROM chat_message WHERE session_id = %s ORDER BY position", (session_id,)
        )
    ]


@pytest.fixture
def llm_proxy(llm) -> Iterator[TcpProxy]:
    proxy = TcpProxy(int(llm.url.rsplit(":", 1)[1])).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def web_via_proxy(base_env: dict[str, str], logdir: Path, llm_proxy: TcpProxy, stack: Stack) -> Iterator[Stack]:
    """One web process whose Ollama is behind ``llm_proxy``."""
    env = {**base_env, "OLLAMA_HOST": f"http://127.0.0.1:{llm_proxy.port}"}
    web = stack_start(env, logdir, name="llm-fault", webs=1, workers=0, pool="solo")
    yield web
    web.stop()


async def test_the_llm_dying_mid_reply_keeps_the_message_and_retry_answers_it(
    web_via_proxy: Stack, llm, llm_proxy: TcpProxy
) -> None:
    web = web_via_proxy
    dsn = web.env["DATABASE_URL"]
    session_id = web.new_session()
    llm.behaviour.chunk_delay_seconds = 0.3
    question = "Tell me about password hashing."
    ws = await WebSocket.connect(web.ws_url(0, session_id), cookie=web.cookie)
    try:
        await ws.send_json(json.dumps({"action": "send", "message": question}))
        await ws.wait_for(lambda f: f.reply("reply-1"), timeout=TURN_SECONDS, what="the reply to start streaming")
        llm_proxy.cut()  # the backend dies: its connections reset, new ones are refused
        await ws.wait_for(lambda f: f.errors(), timeout=TURN_SECONDS, what="an error on the page")
        error = ws.frames.errors()[-1]
        assert re.search(r"Ollama.* (broke off|not reachable|ended the reply)", error), error
        assert "127.0.0.1" not in error  # a user reads no host's URL (issue 49, item 5)
        assert 'value="retry"' in ws.frames.texts[-1] or any('value="retry"' in t for t in ws.frames.texts[-3:])
        # The part of the reply that reached the page is kept, marked as cut.
        kept = history(dsn, session_id)
        assert [role for role, _ in kept] == ["user", "assistant"]
        assert sql(
            dsn, "SELECT done_reason FROM chat_message WHERE session_id = %s AND role = 'assistant'", (session_id,)
        ) == [("error",)]

        llm_proxy.resume()
        llm.behaviour.chunk_delay_seconds = 0.0
        before = len(ws.frames.texts)
        await ws.send_json(json.dumps({"action": "retry"}))
        await ws.wait_for(lambda f: f.turn_done(before), timeout=TURN_SECONDS, what="the retried reply")
    finally:
        await ws.close()
    stored = history(dsn, session_id)
    # Retry answered the question again: a new version of the cut reply, which stays in the history.
    assert [role for role, _ in stored] == ["user", "assistant", "assistant"]
    assert stored[0][1] == question
    assert stored[2][1].strip()
    assert ws.frames.reply("reply-2") == stored[2][1]
    print(f"\nerror shown: {error!r}; cut: {stored[1][1]!r}; after Retry: {stored[2][1]!r}")


@pytest.fixture
def private_redis_stack(base_env: dict[str, str], logdir: Path, stack: Stack) -> Iterator[tuple[Stack, object]]:
    """One web process and one worker on a redis-server of their own, which the test may restart."""
    with redis_server(logdir) as (port, restart):
        env = {**base_env, "REDIS_URL": f"redis://127.0.0.1:{port}/0"}
        web = stack_start(env, logdir, name="redis-fault", webs=1, workers=1, pool="solo")
        yield web, restart
        web.stop()


async def reconnect(url: str, cookie: str) -> tuple[WebSocket, int]:
    """Open the socket again as the page does after a drop: retry (bounded) until it is accepted."""
    refused = 0
    while True:
        try:
            return await WebSocket.connect(url, cookie=cookie), refused
        except ConnectionError:
            refused += 1
            if refused > 20:
                raise
            await asyncio.sleep(0.5)


async def chat_once_free(ws: WebSocket, text: str, *, stored: Callable[[], bool]) -> None:
    """Send ``text`` and wait for its turn to end; while the reply before it is still ending in the web
    process (its last frames wait for the new Redis), the page is told a reply is still coming, and
    sends again once that turn is over, as a person would: the test waits on the server's word, not luck."""
    deadline = asyncio.get_running_loop().time() + TURN_SECONDS
    while True:
        await chat(ws, text)
        if stored() or not any(STILL_COMING in e for e in ws.frames.errors()[-1:]):
            return
        assert asyncio.get_running_loop().time() < deadline, "the reply before never ended"
        await asyncio.sleep(0.2)


async def test_a_redis_restart_during_a_chat_loses_no_message(private_redis_stack, llm) -> None:
    web, restart = private_redis_stack
    dsn = web.env["DATABASE_URL"]
    session_id = web.due_session(pairs=10)
    url = web.ws_url(0, session_id)
    ws = await WebSocket.connect(url, cookie=web.cookie)
    refused = 0
    try:
        await chat(ws, "First question before the restart?")
        llm.behaviour.chunk_delay_seconds = 0.3
        await ws.send_json(json.dumps({"action": "send", "message": "Second question, during the restart?"}))
        await ws.wait_for(lambda f: f.reply("reply-2"), timeout=TURN_SECONDS, what="the second reply to stream")
        restart()  # SIGKILL, then a fresh redis-server on the same port: groups and queues are gone
        llm.behaviour.chunk_delay_seconds = 0.0
        # The turn finishes and is stored, whether or not its socket outlived the restart.
        wait_until(lambda: len(history(dsn, session_id)) == 24, timeout=TURN_SECONDS, what="the second reply stored")
        # The consumer died with its Redis connection; daphne closes its socket only later (its
        # ping), so the test reconnects now, as the page does once its socket is gone.
        dropped = ws.closed.is_set()
        await ws.close()
        ws, refused = await reconnect(url, web.cookie)
        await chat_once_free(
            ws, "Third question after the restart?", stored=lambda: len(history(dsn, session_id)) >= 25
        )
        # Events still reach the page: its socket is in the session's group on the new Redis.
        assert web.post(0, f"/sessions/{session_id}/compress/").status_code == 200
        await ws.wait_for(
            lambda f: any(kind in ("compressed", "compression-skipped", "compression-error") for kind, _ in f.events()),
            timeout=90,
            what="the compression's outcome on the page",
        )
    finally:
        await ws.close()
    stored = history(dsn, session_id)[20:]
    assert stored[0::2] == [
        ("user", "First question before the restart?"),
        ("user", "Second question, during the restart?"),
        ("user", "Third question after the restart?"),
    ]
    assert [role for role, _ in stored[1::2]] == ["assistant"] * 3
    assert all(content.strip() for _, content in stored[1::2])
    print(
        f"\nRedis restarted mid-reply: socket dropped={dropped}, reconnects refused before one was accepted: "
        f"{refused}; the reply in flight was stored: {stored[3][1]!r}"
    )


@pytest.fixture
def worker_via_db_proxy(
    base_env: dict[str, str], logdir: Path, stack: Stack
) -> Iterator[tuple[Proc, TcpProxy, Callable[..., object]]]:
    """A worker whose PostgreSQL connection goes through a proxy the test can cut; a queue of its own."""
    port = int(re.search(r":(\d+)/", base_env["DATABASE_URL"]).group(1))  # type: ignore[union-attr]
    proxy = TcpProxy(port).start()
    env = {**base_env, "DATABASE_URL": base_env["DATABASE_URL"].replace(f":{port}/", f":{proxy.port}/")}
    queue = f"ollm-system-db-fault-{os.getpid()}"
    worker = start_worker("db-fault-worker", env, logdir, queue=queue)
    wait_worker(worker)
    client = Celery(broker=base_env["REDIS_URL"])
    yield worker, proxy, lambda *args: client.send_task("chat.tasks.compress_session", args=args, queue=queue)
    worker.stop()
    proxy.stop()


def test_the_database_going_away_mid_compression_changes_nothing(stack: Stack, worker_via_db_proxy, llm) -> None:
    log, proxy, compress = worker_via_db_proxy
    dsn = stack.env["DATABASE_URL"]
    session_id = stack.due_session(pairs=10)
    before = session_state(dsn, session_id)
    hold = held_generation(llm)
    compress(session_id, "system test", True)
    wait_until(lambda: llm.behaviour.requests, timeout=30, what="the summary request")
    proxy.cut()  # the database goes away while the summary is being written
    hold.set()
    wait_until(
        lambda: re.search(r"compress_session\[[^\]]+\] (raised|succeeded)", log.output()),
        timeout=60,
        what="the worker to finish the task",
    )
    proxy.resume()
    assert session_state(dsn, session_id) == before, "the failed compression changed the session"
    first = list(outcomes(dsn, session_id))

    # The lost lease expires; then a blip: the connection is cut and the database is back before
    # the summary is: the compression reconnects and is applied once.
    wait_until(
        lambda: (
            not sql(
                dsn,
                "SELECT 1 FROM chat_session WHERE id = %s AND compression_started_at > now() - %s",
                (session_id, timedelta(seconds=LEASE_SECONDS)),
            )
        ),
        timeout=LEASE_SECONDS + 10,
        what="the lease to be free",
    )
    asked = len(llm.behaviour.requests)
    hold.clear()
    compress(session_id, "system test again", True)
    wait_until(lambda: len(llm.behaviour.requests) > asked, timeout=30, what="the second summary request")
    proxy.cut()
    proxy.resume()
    hold.set()
    wait_until(lambda: len(outcomes(dsn, session_id)) > len(first), timeout=60, what="the second outcome")
    assert outcomes(dsn, session_id)[len(first) :] == ["compressed"]
    state = session_state(dsn, session_id)
    assert state.checkpoints == 1
    assert state.compression_count == 1
    wait_until(lambda: not lease_held(dsn, session_id), timeout=10, what="the lease to be given back")
    print(f"\noutcomes while the database was gone: {first}; events: {event_types(dsn, session_id)}")
