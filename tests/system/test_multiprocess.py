"""Two daphne web processes and two Celery workers on one PostgreSQL and one Redis."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import time

from tests.factories import LEASE_SECONDS, Stack, chat, held_generation, outcomes
from tests.support.timing import wait_until
from tests.system.support import (
    Proc,
    WebSocket,
    event_types,
    lease_held,
    session_state,
    sql,
)


def db_message_ids(dsn: str, session_id: str) -> list[int]:
    return [
        r[0] for r in sql(dsn, "SELECT id FROM chat_message WHERE session_id = %s ORDER BY position", (session_id,))
    ]


async def test_two_browsers_on_different_web_processes_see_the_same_stream(stack: Stack, llm) -> None:
    session_id = stack.due_session(pairs=10)  # not due yet, but compressible
    dsn = stack.env["DATABASE_URL"]
    first = await WebSocket.connect(stack.ws_url(0, session_id), cookie=stack.cookie)
    second = await WebSocket.connect(stack.ws_url(1, session_id), cookie=stack.cookie)
    # A page was rendered with the history so far; the socket brings it each new message.
    shown = set(db_message_ids(dsn, session_id))
    try:
        await chat(first, "Hello from the first browser. What is argon2?")
        await second.wait_for(
            lambda f: set(db_message_ids(dsn, session_id)) - shown <= set(f.message_ids()),
            timeout=20,
            what="the first browser's turn on the second web process",
        )
        await chat(second, "And a word from the second browser: what is a salt?")
        await first.wait_for(
            lambda f: set(db_message_ids(dsn, session_id)) - shown <= set(f.message_ids()),
            timeout=20,
            what="the second browser's turn on the first web process",
        )
        # A compression, asked for on the second process, runs on a worker; both pages hear of it.
        assert stack.post(1, f"/sessions/{session_id}/compress/").status_code == 200
        for ws in (first, second):
            await ws.wait_for(
                lambda f: any(
                    kind
                    in ("compressed", "compression-skipped", "rolled-over", "rollover-complete", "compression-error")
                    for kind, _ in f.events()
                ),
                timeout=90,
                what="the compression's outcome on both pages",
            )
        await asyncio.sleep(1)  # any straggling frame of the same compression
    finally:
        await first.close()
        await second.close()

    stored = db_message_ids(dsn, session_id)
    assert len(stored) == 24
    assert first.frames.last_history() == second.frames.last_history() == stored
    assert first.frames.events() == second.frames.events()
    published = [kind for kind, _ in first.frames.events() if kind != "progress"]
    assert published == [t for t in event_types(dsn, session_id) if t in published]
    assert published, "no compression event reached the pages"
    print(f"\nboth pages saw {len(stored)} messages and these events in order: {first.frames.events()}")


def test_two_compressions_triggered_at_once_make_one_checkpoint(stack: Stack, llm) -> None:
    session_id = stack.due_session(pairs=10)
    dsn = stack.env["DATABASE_URL"]
    hold = held_generation(llm)
    path = f"/sessions/{session_id}/compress/"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda index: stack.post(index, path), (0, 1)))
    assert [a.status_code for a in answers] == [200, 200]
    scheduled = sum("Compressing…" in a.text for a in answers)
    wait_until(lambda: llm.behaviour.requests, timeout=30, what="the summary request")
    time.sleep(2)  # a second task, if both pages scheduled one, meets the held lease now
    hold.set()
    wait_until(lambda: len(outcomes(dsn, session_id)) >= scheduled, timeout=90, what="every compression's outcome")
    time.sleep(1)
    state = session_state(dsn, session_id)
    assert state.checkpoints == 1
    assert state.compression_count == 1
    assert outcomes(dsn, session_id).count("compressed") == 1
    assert not lease_held(dsn, session_id)
    print(f"\n{scheduled} of 2 'Compress now' scheduled a task; outcomes: {outcomes(dsn, session_id)}")


def running_worker(stack: Stack, before: dict[str, int]) -> Proc:
    """The worker that received a compression task since ``before`` (log lengths by worker name)."""
    for worker in stack.workers:
        if "compress_session" in worker.output()[before[worker.name] :]:
            return worker
    raise AssertionError("no worker received the compression task")


def test_a_worker_killed_mid_compression_changes_nothing_and_the_task_is_retried(stack: Stack, llm) -> None:
    session_id = stack.due_session(pairs=10)
    dsn = stack.env["DATABASE_URL"]
    before = session_state(dsn, session_id)
    logs = {w.name: len(w.output()) for w in stack.workers}
    hold = held_generation(llm)
    assert stack.post(0, f"/sessions/{session_id}/compress/").status_code == 200
    wait_until(lambda: llm.behaviour.requests, timeout=30, what="the summary request")
    worker = running_worker(stack, logs)
    children = worker.children()
    assert len(children) == 1
    os.kill(children[0], signal.SIGKILL)  # the pool process running the task, mid-summary
    time.sleep(1)
    assert session_state(dsn, session_id) == before, "a killed compression changed the session"
    hold.set()
    wait_until(
        lambda: "compressed" in outcomes(dsn, session_id) or "compression-error" in outcomes(dsn, session_id),
        timeout=LEASE_SECONDS + 60,
        what="the retried compression's outcome",
    )
    state = session_state(dsn, session_id)
    assert outcomes(dsn, session_id)[-1] == "compressed"
    assert state.checkpoints == 1
    assert state.compression_count == 1
    compressed = [m for m in state.messages if m[3] is not None]
    assert compressed
    assert all(m[1] == "assistant" for m in compressed)
    assert [m[:3] for m in state.messages] == [m[:3] for m in before.messages], "the history changed"
    wait_until(lambda: not lease_held(dsn, session_id), timeout=10, what="the lease to be given back")
    print(f"\nretried after the kill; outcomes: {outcomes(dsn, session_id)}")
