"""Two daphne web processes and two Celery workers on one PostgreSQL and one Redis."""

from __future__ import annotations

import asyncio
import json

from tests.system.conftest import Stack
from tests.system.support import (
    WebSocket,
    event_types,
    sql,
)

TURN_SECONDS = 60


async def chat(ws: WebSocket, text: str) -> None:
    """Send a message and wait until its turn is over (reply stored and shown, or an error)."""
    before = len(ws.frames.texts)
    await ws.send_json(json.dumps({"action": "send", "message": text}))
    await ws.wait_for(lambda f: f.turn_done(before), timeout=TURN_SECONDS, what=f"the reply to {text!r}")


def db_message_ids(dsn: str, session_id: str) -> list[int]:
    return [
        r[0] for r in sql(dsn, "SELECT id FROM chat_message WHERE session_id = %s ORDER BY position", (session_id,))
    ]


async def test_two_browsers_on_different_web_processes_see_the_same_stream(stack: Stack, llm) -> None:
    session_id = stack.due_session(pairs=10)  # not due yet, but compressible
    dsn = stack.env["DATABASE_URL"]
    first = await WebSocket.connect(stack.ws_url(0, session_id), cookie=stack.cookie)
    second = await WebSocket.connect(stack.ws_url(1, session_id), cookie=stack.cookie)
    try:
        await chat(first, "Hello from the first browser. What is argon2?")
        await second.wait_for(
            lambda f: set(db_message_ids(dsn, session_id)) <= set(f.message_ids()),
            timeout=20,
            what="the first browser's turn on the second web process",
        )
        await chat(second, "And a word from the second browser: what is a salt?")
        await first.wait_for(
            lambda f: set(db_message_ids(dsn, session_id)) <= set(f.message_ids()),
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
