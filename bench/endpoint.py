"""The drop-in endpoints vs the REST API: the same turn through Ollama's API, the OpenAI one and the REST API.

On one session (10 messages of history by default), each round sends the same
message these ways, in an order that turns from round to round:

- direct: the prompt the app builds for that message, straight to the backend
  object the app uses (the embedded backend's ``chat``), streamed: the
  reference for the first token;
- api: ``POST /api/sessions/{id}/messages`` (the REST API's turn, not streamed);
- ollama: ``POST /ollama/api/chat`` with ``"stream": false``, the header
  ``X-OLLM-Session`` naming the session and the one new user message (the turn
  then runs as the REST API's does: ``turn_take``);
- ollama-stream: the same request streamed (NDJSON), its first token the first
  line that carries reply text;
- openai-stream: ``POST /v1/chat/completions`` with ``"stream": true`` (SSE)
  and the same header.

Every app path goes through the ASGI application in this process, read by the
same client (bench/clients.py ``http_post_timed``), up to the answer's last
byte. Temperature 0 and a fixed reply cap, so every path generates the same
reply (checked: the same text, and the prompt the direct path sends); after each
app turn its two messages are removed so every round starts from the same state.

The requirement (the issue): an endpoint's turn is at most 1.05 times the REST
API's. As in bench/turn_overhead.py, the model's own time for the identical
generation varies between calls far more than the app adds, so the figure
checked is the app ratio: per round, the REST API's turn plus the difference of
the two paths' time outside the model (each turn minus the model's own prompt
and generation time, as the model server recorded it), over the REST API's
turn. The turn ratio (endpoint turn / REST API turn, per round) is shown too.

    .venv/bin/python bench/endpoint.py [--messages 10] [--rounds 21] [--reply-tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django, use_model_server

os.environ["OLLM_LLM_BACKEND"] = "embedded"
setup_django()

from asgiref.sync import sync_to_async  # noqa: E402
from clients import HttpAnswer, RecordingBackend, bearer, direct_turn, http_post_timed  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from history import drop_messages_after, last_position, session_with_history  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

from chat.dropin.common import SESSION_HEADER  # noqa: E402
from chat.gateway import get_gateway  # noqa: E402
from chat.models import Message, Session  # noqa: E402
from chat.selectors.context import session_window  # noqa: E402
from chat.services.messages import message_create  # noqa: E402
from engine.core.window import chat_messages  # noqa: E402
from engine.llm import ChatMessage  # noqa: E402
from engine.llm.embedded import MODEL_NAME  # noqa: E402

REQUIRED_RATIO = 1.05
ENDPOINTS = ("ollama", "ollama-stream", "openai-stream")
STREAMED = ("direct", "ollama-stream", "openai-stream")
# bench/turn_overhead.py's message.
MESSAGE = "Summarise where we are with the refresh tokens in two sentences."


def app_prompt(session: Session) -> list[ChatMessage]:
    """The prompt the turn builds once MESSAGE is stored (it is removed again), as bench/turn_overhead.py has it."""
    position = last_position(session)
    message_create(
        session=session,
        role=Message.Role.USER,
        content=MESSAGE,
        token_count=get_gateway().token_counter(session.model).count(MESSAGE),
    )
    messages = [ChatMessage(role, content) for role, content in chat_messages(session_window(session=session))]
    drop_messages_after(session, position)
    return messages


def interval(values: list[float], resamples: int = 2_000) -> tuple[float, float]:
    """The 95% bootstrap interval of the median of ``values`` (seeded: the same rounds give the same interval)."""
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def ollama_lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def ollama_text(body: bytes) -> str:
    """The reply text of NDJSON lines (or of one non-streamed answer); a line with "error" fails the run."""
    lines = ollama_lines(body)
    assert not any("error" in line for line in lines), lines
    return "".join(line.get("message", {}).get("content", "") for line in lines)


def openai_events(body: bytes) -> list[dict[str, Any]]:
    data = [line.removeprefix(b"data: ") for line in body.splitlines() if line.startswith(b"data: ")]
    return [json.loads(item) for item in data if item != b"[DONE]"]


def openai_text(body: bytes) -> str:
    events = openai_events(body)
    assert not any("error" in event for event in events), events
    return "".join(choice["delta"].get("content") or "" for event in events for choice in event["choices"])


async def measure(
    owner: Any, size: int, rounds: int, reply_tokens: int, recorder: RecordingBackend, server: BenchModelServer
) -> dict[str, Any]:
    gateway = get_gateway()
    grown = await sync_to_async(session_with_history)(
        owner=owner,
        model=MODEL_NAME,
        gateway=gateway,
        counter=gateway.token_counter(MODEL_NAME),
        messages=size,
        context_size=4096,
        grown_tail=None,
        headroom=400,
    )
    session = grown.session
    print(f"session: {grown.describe()}", flush=True)
    position = await sync_to_async(last_position)(session)
    backend = recorder.backend
    prompt = await sync_to_async(app_prompt)(session)
    prompt_tokens = backend.count_prompt_tokens(prompt)
    authorization = await sync_to_async(bearer)(owner)
    named = [(SESSION_HEADER.lower().encode(), str(session.pk).encode())]
    chat_body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": MESSAGE}]}
    reset = sync_to_async(drop_messages_after)

    async def direct() -> tuple[HttpAnswer, str]:
        timed, _result = await direct_turn(
            recorder.direct, prompt, model=MODEL_NAME, num_ctx=session.max_tokens, max_tokens=reply_tokens
        )
        return HttpAnswer(timed, 200, {}, b""), ""

    async def app_turn(url: str, payload: dict[str, Any], text: Callable[[bytes], str]) -> tuple[HttpAnswer, str]:
        """One turn through the application; the reply's text, once the turn's messages are removed again."""
        recorder.calls.clear()
        answer = await http_post_timed(
            url, authorization, payload, headers=named, carries_text=lambda chunk: bool(text(chunk))
        )
        await reset(session, position)
        assert answer.status == 200, (url, answer.status, answer.body[:500])
        assert recorder.calls == [prompt], f"{url} sent another prompt"
        if url != f"/api/sessions/{session.pk}/messages":
            assert answer.headers.get(SESSION_HEADER.lower()) == str(session.pk), answer.headers
        return answer, text(answer.body)

    async def api() -> tuple[HttpAnswer, str]:
        return await app_turn(
            f"/api/sessions/{session.pk}/messages",
            {"content": MESSAGE},
            lambda body: str(json.loads(body)["assistant_message"]["content"]) if body else "",
        )

    async def ollama() -> tuple[HttpAnswer, str]:
        return await app_turn("/ollama/api/chat", {**chat_body, "stream": False}, ollama_text)

    async def ollama_stream() -> tuple[HttpAnswer, str]:
        return await app_turn("/ollama/api/chat", {**chat_body, "stream": True}, ollama_text)

    async def openai_stream() -> tuple[HttpAnswer, str]:
        return await app_turn("/v1/chat/completions", {**chat_body, "stream": True}, openai_text)

    paths: dict[str, Callable[[], Awaitable[tuple[HttpAnswer, str]]]] = {
        "direct": direct,
        "api": api,
        "ollama": ollama,
        "ollama-stream": ollama_stream,
        "openai-stream": openai_stream,
    }
    replies: list[int] = []
    texts: set[str] = set()

    async def turn(path: str) -> tuple[HttpAnswer, float, float]:
        """One path's turn, its first token's time (of a streamed one), and the model's own time for
        the one generation it asked for."""
        await sync_to_async(server.clear)()
        started = time.perf_counter()
        answer, text = await paths[path]()
        token_times = answer.timed.token_times
        first_token = token_times[0] - started if token_times else 0.0
        served = await sync_to_async(server.wait_served)(1)
        assert [entry.priority for entry in served] == ["interactive"], served
        replies.append(served[0].completion_tokens)
        if path != "direct":
            texts.add(text)
        return answer, first_token, served[0].model_seconds

    for name in paths:  # warm: the prompt's first evaluation, each view's first call
        await turn(name)
    # The first evaluation of a prompt may pick another reply than the cached ones after it.
    replies.clear()
    texts.clear()
    times: dict[str, list[float]] = {name: [] for name in paths}
    first: dict[str, list[float]] = {name: [] for name in STREAMED}
    model: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for number in range(rounds):
        # The order turns each round: a call's place in the round changes the model's own time.
        for name in names[number % len(names) :] + names[: number % len(names)]:
            answer, first_token, inside = await turn(name)  # the turn only: the reset and the record are not counted
            times[name].append(answer.timed.seconds)
            model[name].append(inside)
            if name in first:
                assert answer.timed.token_times, f"{name}: no chunk carried reply text"
                first[name].append(first_token)
    assert len(set(replies)) == 1, f"the paths generated replies of different lengths: {replies}"
    assert len(texts) == 1, f"the app paths answered different texts: {texts}"
    return {
        "grown": grown,
        "prompt_tokens": prompt_tokens,
        "reply_tokens": replies[0],
        "times": times,
        "first": first,
        "model": model,
    }


def ratios_to_api(
    times: dict[str, list[float]], model: dict[str, list[float]], path: str
) -> tuple[list[float], list[float]]:
    """Per round: the turn ratio path / api, and the app ratio (the api turn + the path's time outside the
    model - the api's time outside the model) / the api turn."""
    turns, apps = [], []
    for api, turn, api_inside, inside in zip(times["api"], times[path], model["api"], model[path], strict=True):
        turns.append(turn / api)
        apps.append((api + (turn - inside) - (api - api_inside)) / api)
    return turns, apps


def span(values: list[float]) -> str:
    low, high = interval(values)
    return f"{statistics.median(values):.3f} ({low:.3f}-{high:.3f})"


async def run(size: int, rounds: int, reply_tokens: int, server: BenchModelServer) -> int:
    report = Report("endpoint")
    owner = await sync_to_async(get_user_model().objects.create_user)(username="bench")
    backend = get_gateway().embedded
    assert backend is not None
    recorder = RecordingBackend(backend)
    with override_settings(
        OLLM_REPLY_MAX_TOKENS=reply_tokens, OLLM_CONTEXT_DEFAULTS={"sampling": {"temperature": 0.0}}
    ):
        r = await measure(owner, size, rounds, reply_tokens, recorder, server)
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    t, model, first = r["times"], r["model"], r["first"]
    report.print(
        f"== drop-in endpoint vs REST API, {MODEL_NAME}, temperature 0, {size} messages "
        f"({r['prompt_tokens']:,}-token prompt, {r['reply_tokens']}-token reply), {rounds} rounds (order turning)"
    )
    report.print(
        "| path | first token p50 | turn p50 | outside the model p50 | model time vs api "
        "| turn ratio vs api (95% interval) | app ratio vs api (95% interval) |"
    )
    report.print("|---|---:|---:|---:|---:|---:|---:|")
    ok = True
    for path in t:
        outside = statistics.median(a - m for a, m in zip(t[path], model[path], strict=True))
        first_token = f"{statistics.median(first[path]) * 1000:,.0f} ms" if path in first else ""
        row = f"| {path} | {first_token} | {statistics.median(t[path]) * 1000:,.0f} ms | {outside * 1000:.0f} ms "
        if path not in ENDPOINTS:
            report.print(row + "| | | |")
            continue
        slower = statistics.median(model[path]) / statistics.median(model["api"])
        turns, apps = ratios_to_api(t, model, path)
        passed = statistics.median(apps) <= REQUIRED_RATIO
        ok = ok and passed
        report.print(row + f"| {slower:.3f} | {span(turns)} | **{span(apps)}**{'' if passed else ' FAILED'} |")
    report.print(
        "first token: from the request to the first chunk that carries reply text (streamed paths); outside the "
        "model: the turn's time (to the answer's last byte) minus the model's own prompt and generation time (the "
        "model server's clock, under the model's lock); model time vs api: p50 of the model's own time on the path "
        "over that on the REST API's turn"
    )
    report.print(
        "turn ratio: median of the per-round ratios path / api; app ratio: median over the rounds of (the api turn "
        "+ the path's time outside the model - the api's) / the api turn, "
        f"required <= {REQUIRED_RATIO}"
    )
    report.save()
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--reply-tokens", type=int, default=256)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    with BenchModelServer() as server:
        use_model_server(server.url)
        return asyncio.run(run(args.messages, args.rounds, args.reply_tokens, server))


if __name__ == "__main__":
    sys.exit(main())
