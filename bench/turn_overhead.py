"""What the app adds to a turn: the REST API and the websocket vs the backend called straight.

For sessions whose history holds 10, 1,000 and 10,000 messages (grown through
real compressions, so most of a long history is compressed and the active
prompt is comparable), each round sends the same message three ways, in turn:

- direct: the prompt the app builds for that message, straight to the backend
  object the app uses (the embedded SmolLM2's ``chat``), reply read to the end;
- api: ``POST /api/sessions/{id}/messages`` through the ASGI application (token
  auth, ninja, the turn: store, budget, prompt, reply, store, markers);
- ws: the chat page's frame through the websocket, up to the frame that closes
  the turn (the reply streamed token by token, then the history re-rendered).

Temperature 0 and a fixed reply cap, so every path generates the same reply;
after each app turn its two messages are removed so every round starts from
the same state and the prompts are identical (the benchmark checks both). The
figure is the median of the per-round ratios app / direct, required <= 1.05.

    .venv/bin/python bench/turn_overhead.py [--sizes 10 1000 10000] [--rounds 7] [--reply-tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django

os.environ["OLLM_LLM_BACKEND"] = "embedded"
setup_django()

from asgiref.sync import sync_to_async  # noqa: E402
from clients import RecordingBackend, Timed, api_turn, bearer, direct_turn, session_cookie, ws_connect, ws_turn  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from history import drop_messages_after, last_position, session_with_history  # noqa: E402

from chat.models import Message, Session  # noqa: E402
from chat.services import message_create  # noqa: E402
from contextmgr.core.window import chat_messages  # noqa: E402
from contextmgr.llm import ChatMessage, ChatResult, get_gateway  # noqa: E402
from contextmgr.llm.embedded import MODEL_NAME, EmbeddedBackend  # noqa: E402
from contextmgr.selectors import session_window  # noqa: E402

REQUIRED_RATIO = 1.05
MESSAGE = "Summarise where we are with the refresh tokens in two sentences."


def app_prompt(session: Session, backend: EmbeddedBackend) -> list[ChatMessage]:
    """The prompt the turn builds once MESSAGE is stored (it is removed again)."""
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


async def measure(owner: Any, size: int, rounds: int, reply_tokens: int, recorder: RecordingBackend) -> dict[str, Any]:
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
        timed, result = await direct_turn(
            recorder.direct, prompt, model=MODEL_NAME, num_ctx=session.max_tokens, max_tokens=reply_tokens
        )
        replies.append(result.completion_tokens)
        model_seconds.append(result.prompt_seconds + result.generation_seconds)
        return timed

    async def api() -> Timed:
        recorder.calls.clear()
        timed = await api_turn(session.pk, authorization, MESSAGE)
        await reset(session, position)
        assert recorder.calls == [prompt], "the API turn sent another prompt"
        record(backend.recent_results[-1])
        return timed

    async def ws() -> Timed:
        recorder.calls.clear()
        timed = await ws_turn(socket, MESSAGE)
        await reset(session, position)
        assert recorder.calls == [prompt], "the websocket turn sent another prompt"
        record(backend.recent_results[-1])
        return timed

    def record(result: ChatResult) -> None:
        replies.append(result.completion_tokens)
        model_seconds.append(result.prompt_seconds + result.generation_seconds)

    replies: list[int] = []
    model_seconds: list[float] = []
    paths = {"direct": direct, "api": api, "ws": ws}
    for run in paths.values():  # warm: the prompt's first evaluation, the first render
        await run()
    # The first evaluation of a prompt may pick another reply than the cached ones after it
    # (llama.cpp sums in another order): only the measured rounds must agree.
    replies.clear()
    times: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    outside: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, run in paths.items():
            timed = await run()  # the turn only: the reset between rounds is not counted
            times[name].append(timed.seconds)
            cpu[name].append(timed.cpu_seconds)
            outside[name].append(timed.seconds - model_seconds[-1])
    await socket.disconnect()
    assert len(set(replies)) == 1, f"the paths generated replies of different lengths: {replies}"
    return {
        "size": size,
        "grown": grown,
        "prompt_tokens": prompt_tokens,
        "reply_tokens": replies[0],
        "times": times,
        "cpu": cpu,
        "outside": outside,
    }


def ratio(times: dict[str, list[float]], path: str) -> float:
    """Median of the per-round ratios path / direct (each app round runs right after its direct one)."""
    return statistics.median(a / d for a, d in zip(times[path], times["direct"], strict=True))


async def run(sizes: list[int], rounds: int, reply_tokens: int) -> int:
    owner = await sync_to_async(get_user_model().objects.create_user)(username="bench")
    backend = get_gateway().embedded
    assert backend is not None
    recorder = RecordingBackend(backend)
    results = []
    with override_settings(OLLM_REPLY_MAX_TOKENS=reply_tokens, OLLM_CHAT_TEMPERATURE=0.0):
        for size in sizes:
            results.append(await measure(owner, size, rounds, reply_tokens, recorder))
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"== turn time, {MODEL_NAME}, temperature 0, {rounds} rounds of (direct, api, ws), p50 in ms")
    print(
        "| messages | active prompt | reply | direct | api | ws | api/direct | ws/direct "
        "| CPU added by api | CPU added by ws | outside the model: direct / api / ws |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ok = True
    for r in results:
        t = r["times"]
        p50 = {name: statistics.median(values) * 1000 for name, values in t.items()}
        api_ratio, ws_ratio = ratio(t, "api"), ratio(t, "ws")
        ok = ok and api_ratio <= REQUIRED_RATIO and ws_ratio <= REQUIRED_RATIO
        added = {name: statistics.median(r["cpu"][name]) - statistics.median(r["cpu"]["direct"]) for name in t}
        outside = " / ".join(f"{statistics.median(r['outside'][name]) * 1000:.0f}" for name in t)
        print(
            f"| {r['size']:,} | {r['prompt_tokens']:,} tokens | {r['reply_tokens']} tokens | {p50['direct']:.0f} | "
            f"{p50['api']:.0f} | {p50['ws']:.0f} | {api_ratio:.3f} | {ws_ratio:.3f} | "
            f"{added['api'] * 1000:.0f} ms | {added['ws'] * 1000:.0f} ms | {outside} ms |"
        )
    print(f"ratios: median of per-round ratios, required <= {REQUIRED_RATIO}")
    print(
        "CPU added: p50 of the process's CPU time (model threads included) for the path minus that of the direct "
        "call; the model's work is the same in both, so this is the app's own, whatever else the machine runs"
    )
    print(
        "outside the model: p50 of the turn's time minus the time the backend spent evaluating the prompt and "
        "generating (its own clock, under the model's lock): what each path adds around the model"
    )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reply-tokens", type=int, default=256)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    return asyncio.run(run(args.sizes, args.rounds, args.reply_tokens))


if __name__ == "__main__":
    sys.exit(main())
