"""What the app adds to a turn: the REST API and the websocket vs the backend called straight.

For sessions whose history holds 10, 1,000 and 10,000 messages (grown through
real compressions, so most of a long history is compressed and the active
prompt is comparable), each round sends the same message three ways, in an
order that turns from round to round:

- direct: the prompt the app builds for that message (in a long session, with what
  the history recalls for it: its words match old messages), straight to the backend
  object the app uses (the embedded backend's ``chat``: the HTTP client of the
  model server, which runs SmolLM2), reply read to the end;
- api: ``POST /api/sessions/{id}/messages`` through the ASGI application (token
  auth, ninja, the turn: store, budget, prompt, reply, store, markers), with the
  session's chat page open (the websocket path's); the page's frame that appends
  the turn's messages, rendered once the answer is sent, is awaited after the
  turn (not counted), so it falls into no other turn;
- ws: the chat page's frame through the websocket, up to the frame that closes
  the turn (the reply streamed token by token, then the history re-rendered).

Temperature 0 and a fixed reply cap, so every path generates the same reply;
after each app turn its two messages are removed so every round starts from
the same state and the prompts are identical (the benchmark checks both).

Two figures per path, each the median over the rounds:

- turn ratio: app turn / the direct turn of the same round, with its 95%
  interval (bootstrap over the rounds). On a shared 2-core machine the model's
  own time for the identical generation varies by 10-40% between calls a
  second apart, far more than the app adds, so this figure swings from run
  to run;
- app ratio (required <= 1.05): the model's own time in the round's direct turn
  plus the time the path spent outside the model (its turn minus the model's
  own prompt and generation time, under the model's lock, as the model server
  recorded it), over the direct turn: the same measure with the model's noise
  taken out. The direct turn's own time outside the model (the HTTP to the
  model server, reading its stream) is in the path's too, and counted there. Whether the app slows the model
  itself (a busy event loop during generation) shows in the model-time column.

The model server is the benchmark's own (bench/model_server.py, with its test
controls, whose record of each generation gives the model's own time).

    .venv/bin/python bench/turn_overhead.py [--sizes 10 1000 10000] [--rounds 21] [--reply-tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django, use_model_server

os.environ["OLLM_LLM_BACKEND"] = "embedded"
setup_django()

from asgiref.sync import sync_to_async  # noqa: E402
from clients import (  # noqa: E402
    RecordingBackend,
    Timed,
    api_turn,
    bearer,
    direct_turn,
    page_appended,
    session_cookie,
    ws_connect,
    ws_turn,
)
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from history import drop_messages_after, last_position, session_with_history  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

from chat.gateway import get_gateway  # noqa: E402
from chat.models import Message, Session  # noqa: E402
from chat.selectors.context import session_window  # noqa: E402
from chat.selectors.recall import session_recall  # noqa: E402
from chat.services.messages import message_create  # noqa: E402
from engine.core.recall import with_recall  # noqa: E402
from engine.core.window import chat_messages  # noqa: E402
from engine.llm import ChatMessage  # noqa: E402
from engine.llm.embedded import MODEL_NAME, EmbeddedBackend  # noqa: E402
from modelserver.engine import Engine, bundled_model_path  # noqa: E402
from modelserver.engine import Message as EngineMessage  # noqa: E402
from modelserver.native import start_server  # noqa: E402

REQUIRED_RATIO = 1.05
RAW = "llama.cpp"
# What the model server samples with when a turn sets only the temperature (Ollama's defaults):
# llama.cpp straight must pick the same tokens.
SERVER_SAMPLING: dict[str, Any] = {"top_k": 40, "top_p": 0.9, "min_p": 0.0, "repeat_penalty": 1.1}


class RawLlama:
    """llama.cpp in this process at the model server's thread count: the same prompt tokens (the
    server's chat template), the same sampling, nothing around it."""

    def __init__(self, threads: int) -> None:
        self.template = Engine(n_ctx=4096, n_threads=1)
        self.server, _ = start_server(bundled_model_path(), n_ctx=4096, n_threads=threads, slots=1, seed=1234)

    def turn(self, prompt: list[ChatMessage], reply_tokens: int) -> tuple[float, int]:
        """Seconds from the call to the reply's end, and the reply's tokens."""
        text, stops = self.template.prompt_for([EngineMessage(m.role, m.content) for m in prompt])
        tokens = list(self.template.prompt_tokens(text))
        started = time.perf_counter()
        done: Any = self.server.handle_completions(
            {
                "prompt": tokens,
                "max_tokens": reply_tokens,
                "temperature": 0.0,
                "stop": stops,
                "seed": 1234,
                **SERVER_SAMPLING,
            }
        )
        seconds = time.perf_counter() - started
        # The model server counts every token it sampled, the end-of-text token that stopped the reply
        # included, as llama.cpp's server's usage does.
        return seconds, int(done["usage"]["completion_tokens"])


MESSAGE = "Summarise where we are with the refresh tokens in two sentences."


def app_prompt(session: Session, backend: EmbeddedBackend) -> list[ChatMessage]:
    """The prompt the turn builds once MESSAGE is stored (it is removed again): in a long session, with
    what the history recalls for it (the turn's own ``session_recall``) just before it."""
    position = last_position(session)
    message_create(
        session=session,
        role=Message.Role.USER,
        content=MESSAGE,
        token_count=get_gateway().token_counter(session.model).count(MESSAGE),
    )
    messages = [ChatMessage(role, content) for role, content in chat_messages(session_window(session=session))]
    found = session_recall(session=session, query=MESSAGE, prompt_tokens=backend.count_prompt_tokens(messages))
    messages[-1] = ChatMessage(messages[-1].role, with_recall(found, messages[-1].content))
    drop_messages_after(session, position)
    return messages


async def measure(
    owner: Any,
    size: int,
    rounds: int,
    reply_tokens: int,
    recorder: RecordingBackend,
    server: BenchModelServer,
    raw: RawLlama,
) -> dict[str, Any]:
    gateway = get_gateway()
    counter = gateway.token_counter(MODEL_NAME)
    grown = await sync_to_async(session_with_history)(
        owner=owner,
        model=MODEL_NAME,
        gateway=gateway,
        counter=counter,
        messages=size,
        context_size=4096,
        grown_tail=None,
        headroom=400,
    )
    session = grown.session
    print(f"session: {grown.describe()}", flush=True)
    position = await sync_to_async(last_position)(session)
    backend = recorder.backend
    prompt = await sync_to_async(app_prompt)(session, backend)
    prompt_tokens = backend.count_prompt_tokens(prompt)
    cookie = await sync_to_async(session_cookie)(owner)
    authorization = await sync_to_async(bearer)(owner)
    socket = await ws_connect(session.pk, cookie)
    reset = sync_to_async(drop_messages_after)

    async def direct() -> Timed:
        timed, _result = await direct_turn(
            recorder.direct, prompt, model=MODEL_NAME, num_ctx=session.max_tokens, max_tokens=reply_tokens
        )
        return timed

    async def api() -> Timed:
        recorder.calls.clear()
        timed = await api_turn(session.pk, authorization, MESSAGE)
        # The open page renders the turn's messages once the answer is sent: that work, for another
        # client, must not fall into the next path's turn.
        await page_appended(socket)
        await reset(session, position)
        assert recorder.calls == [prompt], "the API turn sent another prompt"
        return timed

    async def ws() -> Timed:
        recorder.calls.clear()
        timed = await ws_turn(socket, MESSAGE)
        await reset(session, position)
        assert recorder.calls == [prompt], "the websocket turn sent another prompt"
        return timed

    async def turn(path: str) -> Timed:
        """One path's turn, and the model's own record of the one generation it asked for."""
        if path == RAW:
            seconds, tokens = raw.turn(prompt, reply_tokens)
            replies.append(tokens)
            model_seconds.append(seconds)
            return Timed(seconds)
        await sync_to_async(server.clear)()
        timed = await paths[path]()
        served = await sync_to_async(server.wait_served)(1)
        assert [entry.priority for entry in served] == ["interactive"], served
        replies.append(served[0].completion_tokens)
        model_seconds.append(served[0].model_seconds)
        return timed

    replies: list[int] = []
    model_seconds: list[float] = []
    paths = {"direct": direct, "api": api, "ws": ws, RAW: direct}  # RAW: ``turn`` runs it itself
    for name in paths:  # warm: the prompt's first evaluation, the first render
        await turn(name)
    # The first evaluation of a prompt may pick another reply than the cached ones after it
    # (llama.cpp sums in another order): only the measured rounds must agree.
    replies.clear()
    times: dict[str, list[float]] = {name: [] for name in paths}
    model: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for number in range(rounds):
        # The order turns each round: a call's place in the round changed the model's own time
        # by up to 7% here (whatever ran just before it), which a fixed order charges to one path.
        for name in names[number % len(names) :] + names[: number % len(names)]:
            timed = await turn(name)  # the turn only: the reset and the record are not counted
            times[name].append(timed.seconds)
            model[name].append(model_seconds[-1])
    await socket.disconnect()
    assert len(set(replies)) == 1, f"the paths generated replies of different lengths: {replies}"
    return {
        "size": size,
        "grown": grown,
        "prompt_tokens": prompt_tokens,
        "reply_tokens": replies[0],
        "times": times,
        "model": model,
    }


def round_ratios(times: dict[str, list[float]], path: str, *, over: str = "direct") -> list[float]:
    """The per-round ratios path / ``over`` (the calls of a round run one after the other)."""
    return [a / d for a, d in zip(times[path], times[over], strict=True)]


def app_ratios(times: dict[str, list[float]], model: dict[str, list[float]], path: str) -> list[float]:
    """Per round: (the direct turn's model time + the path's time outside the model) / the direct turn.

    The direct turn's own time outside the model (the model server's HTTP, the client reading the
    stream) is the path's too: the path calls the same backend object, so it is counted once, in
    the path's time outside the model."""
    return [
        (direct_inside + turn - inside) / direct
        for direct, direct_inside, turn, inside in zip(
            times["direct"], model["direct"], times[path], model[path], strict=True
        )
    ]


def interval(values: list[float], resamples: int = 2_000) -> tuple[float, float]:
    """The 95% bootstrap interval of the median of ``values`` (seeded: the same rounds give the same interval)."""
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


async def run(sizes: list[int], rounds: int, reply_tokens: int, server: BenchModelServer) -> int:
    report = Report("turn_overhead")
    owner = await sync_to_async(get_user_model().objects.create_user)(username="bench")
    backend = get_gateway().embedded
    assert backend is not None
    recorder = RecordingBackend(backend)
    raw = RawLlama(server.threads_used())
    results = []
    with override_settings(
        OLLM_REPLY_MAX_TOKENS=reply_tokens, OLLM_CONTEXT_DEFAULTS={"sampling": {"temperature": 0.0}}
    ):
        for size in sizes:
            results.append(await measure(owner, size, rounds, reply_tokens, recorder, server, raw))
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    report.print(
        f"== turn time, {MODEL_NAME}, temperature 0, {rounds} rounds of direct, api, ws and llama.cpp (order turning)"
    )
    report.print(
        "| messages | active prompt | reply | path | turn p50 | outside the model p50 | model time vs direct "
        "| turn ratio (95% interval) | vs llama.cpp (95% interval) | app ratio (95% interval) |"
    )
    report.print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    ok = True
    for r in results:
        t, model = r["times"], r["model"]
        for path in t:
            turn, outside = (
                statistics.median(t[path]),
                statistics.median(a - m for a, m in zip(t[path], model[path], strict=True)),
            )
            row = f"| {r['size']:,} | {r['prompt_tokens']:,} tokens | {r['reply_tokens']} tokens | {path} "
            row += f"| {turn * 1000:,.0f} ms | {outside * 1000:.0f} ms "
            if path == RAW:
                report.print(row + "| | | | |")
                continue
            raws = round_ratios(t, path, over=RAW)
            row_raw = f"| {statistics.median(raws):.3f} ({'{:.3f}-{:.3f}'.format(*interval(raws))}) "
            if path == "direct":
                report.print(row + "| | " + row_raw + "| |")
                continue
            slower = statistics.median(model[path]) / statistics.median(model["direct"])
            turns, apps = round_ratios(t, path), app_ratios(t, model, path)
            ok = ok and statistics.median(apps) <= REQUIRED_RATIO
            report.print(
                row
                + f"| {slower:.3f} | {statistics.median(turns):.3f} ({'{:.3f}-{:.3f}'.format(*interval(turns))}) "
                + row_raw
                + f"| {statistics.median(apps):.3f} ({'{:.3f}-{:.3f}'.format(*interval(apps))}) |"
            )
    report.print(
        "outside the model: the turn's time minus the model's own prompt and generation time (the model server's "
        "clock, under the model's lock); model time vs direct: p50 of the model's own time on the path over that on "
        "the direct call"
    )
    report.print(
        "turn ratio: median of the per-round ratios path / direct; vs llama.cpp: the same over llama.cpp called "
        "straight in this process at the server's thread count (same prompt tokens, sampling and reply); "
        "app ratio: median over the rounds of (the model's time in the direct "
        "turn + the path's time outside the model, which holds the model server's HTTP) / the direct turn, "
        f"required <= {REQUIRED_RATIO}"
    )
    report.save()
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--reply-tokens", type=int, default=256)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    with BenchModelServer() as server:
        use_model_server(server.url)
        return asyncio.run(run(args.sizes, args.rounds, args.reply_tokens, server))


if __name__ == "__main__":
    sys.exit(main())
