"""Load: 50 chat sockets at once on the two web processes, each its own session, answered by the
real embedded model behind the Ollama stand-in. Measured figures are printed, not asserted."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from functools import partial

from tests.factories import Stack
from tests.system.support import Frames, WebSocket, sql

SOCKETS = 50
TURNS = 1
TURN_TIMEOUT = 180


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


async def socket_turns(ws: WebSocket, index: int) -> list[tuple[str, float]]:
    """The turns, one after the other; each message with its wall time (send to the turn's last frame)."""
    timings = []
    for turn in range(1, TURNS + 1):
        text = f"Socket {index}, turn {turn}: name one colour."
        before = len(ws.frames.texts)
        started = time.perf_counter()
        await ws.send_json(json.dumps({"action": "send", "message": text}))
        await ws.wait_for(partial(Frames.turn_done, since=before), timeout=TURN_TIMEOUT, what=f"the reply to {text}")
        timings.append((text, time.perf_counter() - started))
    return timings


async def test_fifty_sockets_chatting_at_once_lose_and_duplicate_nothing(stack: Stack, llm) -> None:
    dsn = stack.env["DATABASE_URL"]
    ids = stack.new_sessions(SOCKETS)
    sockets = await asyncio.gather(
        *(WebSocket.connect(stack.ws_url(i % 2, sid), cookie=stack.cookie) for i, sid in enumerate(ids))
    )
    started = time.perf_counter()
    try:
        results = await asyncio.gather(*(socket_turns(ws, i) for i, ws in enumerate(sockets)))
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets))
    duration = time.perf_counter() - started

    served = {s.last_message: s for s in llm.behaviour.served}
    overheads, beyond_model = [], []
    for index, (sid, ws, timings) in enumerate(zip(ids, sockets, results, strict=True)):
        rows = sql(dsn, "SELECT role, content FROM chat_message WHERE session_id = %s ORDER BY position", (sid,))
        expected_users = [f"Socket {index}, turn {turn}: name one colour." for turn in range(1, TURNS + 1)]
        assert not ws.frames.errors(), f"socket {index}: {ws.frames.errors()}"
        assert [r[0] for r in rows] == ["user", "assistant"] * TURNS, f"socket {index}: {rows}"
        assert [r[1] for r in rows[0::2]] == expected_users
        for turn, (_, reply) in enumerate(rows[1::2], start=1):
            assert reply.strip(), f"socket {index} turn {turn}: empty reply"
            assert ws.frames.reply(f"reply-{turn}") == reply, f"socket {index} turn {turn}: incomplete stream"
        for text, wall in timings:
            overheads.append(wall - served[text].server_seconds)
            beyond_model.append(wall - served[text].model_seconds)
    total = sql(
        dsn,
        "SELECT count(*), count(DISTINCT (session_id, position)) FROM chat_message WHERE session_id = ANY(%s)",
        (ids,),
    )
    assert total[0][0] == total[0][1] == SOCKETS * TURNS * 2
    walls = [wall for timings in results for _, wall in timings]
    print(
        f"\nload: {SOCKETS} sockets on 2 web processes, {len(walls)} turns in {duration:.1f} s; "
        f"turn wall p50 {statistics.median(walls):.2f} s, p95 {p95(walls):.2f} s; "
        f"app overhead (wall - time in the LLM server) p50 {statistics.median(overheads) * 1000:.0f} ms, "
        f"p95 {p95(overheads) * 1000:.0f} ms; wall - model generation p95 {p95(beyond_model):.2f} s; "
        f"model time per reply p50 {statistics.median(s.model_seconds for s in served.values()):.2f} s"
    )
