"""Tokens/s a websocket client receives vs tokens/s the backend produces.

A short session, a long reply (200 tokens by default, temperature 0), rounds
alternating the backend alone (the app's prompt straight to its ``chat``, the
HTTP client of the benchmark's own model server) and a turn through the chat
websocket (ASGI application in this process). For the websocket turn,
"produced" is the model's own decode speed in that very generation (its first
to last token, by the model server's clock, as its final counts report it),
"delivered" the same tokens over the time between the first and the last
token frame the client received. The figure is the median per-round ratio
delivered / produced, required >= 0.98; delivered / the backend alone in the
round before is shown too.

    .venv/bin/python bench/streaming.py [--rounds 7] [--reply-tokens 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from turn_overhead import MESSAGE, app_prompt  # noqa: I001  (sets Django up first)

from asgiref.sync import sync_to_async
from clients import RecordingBackend, direct_turn, session_cookie, ws_connect, ws_turn
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test.utils import override_settings
from django_setup import use_model_server
from history import drop_messages_after, last_position, session_with_history
from model_server import BenchModelServer
from report import Report

from chat.gateway import get_gateway
from engine.llm.embedded import MODEL_NAME

REQUIRED_RATIO = 0.98


def rate(tokens: int, times: list[float]) -> float:
    """Tokens per second between the first and the last token."""
    return (tokens - 1) / (times[-1] - times[0])


async def run(rounds: int, reply_tokens: int, server: BenchModelServer) -> int:
    report = Report("streaming")
    owner = await sync_to_async(get_user_model().objects.create_user)(username="bench")
    gateway = get_gateway()
    backend = gateway.embedded
    assert backend is not None
    recorder = RecordingBackend(backend)
    grown = await sync_to_async(session_with_history)(
        owner=owner,
        model=MODEL_NAME,
        gateway=gateway,
        counter=gateway.token_counter(MODEL_NAME),
        messages=10,
        context_size=4096,
        grown_tail=None,
    )
    session = grown.session
    position = await sync_to_async(last_position)(session)
    prompt = await sync_to_async(app_prompt)(session, backend)
    socket = await ws_connect(session.pk, await sync_to_async(session_cookie)(owner))
    direct, produced, delivered = [], [], []
    with override_settings(
        OLLM_REPLY_MAX_TOKENS=reply_tokens, OLLM_CONTEXT_DEFAULTS={"sampling": {"temperature": 0.0}}
    ):
        for round_ in range(rounds + 1):  # the first round warms up
            timed, result = await direct_turn(
                recorder.direct, prompt, model=MODEL_NAME, num_ctx=session.max_tokens, max_tokens=reply_tokens
            )
            recorder.calls.clear()
            await sync_to_async(server.clear)()
            turn = await ws_turn(socket, MESSAGE)
            await sync_to_async(drop_messages_after)(session, position)
            assert recorder.calls == [prompt], "the websocket turn sent another prompt"
            served = await sync_to_async(server.wait_served)(1)
            assert [entry.priority for entry in served] == ["interactive"], served
            # The server's record has no decode time of its own (prompt and generation together):
            # that comes with the reply's final counts, from the same clock.
            generated = recorder.last_result
            assert generated is not None, "the websocket turn's reply did not end"
            assert served[0].completion_tokens == generated.completion_tokens == result.completion_tokens, (
                "the replies differ"
            )
            if round_:
                direct.append(rate(result.completion_tokens, timed.token_times))
                produced.append((generated.completion_tokens - 1) / generated.generation_seconds)
                delivered.append(rate(generated.completion_tokens, turn.token_times))
    await socket.disconnect()
    ratio = statistics.median(d / p for d, p in zip(delivered, produced, strict=True))
    ratio_direct = statistics.median(d / p for d, p in zip(delivered, direct, strict=True))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    report.print(
        f"== streaming, {MODEL_NAME}, {result.completion_tokens}-token replies, {rounds} rounds, tokens/s (p50)"
    )
    report.print(
        "| backend alone | backend in the websocket turn | delivered to the client "
        "| delivered / produced | delivered / alone |"
    )
    report.print("|---:|---:|---:|---:|---:|")
    report.print(
        f"| {statistics.median(direct):.1f} | {statistics.median(produced):.1f} | {statistics.median(delivered):.1f} "
        f"| {ratio:.3f} | {ratio_direct:.3f} |"
    )
    report.print(f"ratios: median of per-round ratios; delivered / produced required >= {REQUIRED_RATIO}")
    report.save()
    return 0 if ratio >= REQUIRED_RATIO else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reply-tokens", type=int, default=200)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    with BenchModelServer() as server:
        use_model_server(server.url)
        return asyncio.run(run(args.rounds, args.reply_tokens, server))


if __name__ == "__main__":
    sys.exit(main())
