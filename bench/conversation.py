"""A long conversation through the embedded model, and the non-LLM cost of a compression.

Part 1: a scripted conversation (200 turns by default) at each selected
context size (``--size``, default 4K; 2K and 4K are Tier 1, where every
compression is a rollover) through the real SmolLM2 model. Prints the
compressions, every call's prompt against num_ctx (exact counts; none may
exceed it, reply cap included), the tokens each compression saved, and the
share of the wall time spent compressing.

Part 2: the non-LLM overhead of one compression (selection, snapshot, DB
writes, events; the ``truncate`` strategy, so no model call) in sessions whose
history holds 1,000 and 10,000 messages but whose active context is the same,
to show the cost follows the messages compressed, not the session's length.

The model runs in a model server of the benchmark's own (bench/model_server.py).

    .venv/bin/python bench/conversation.py [--turns 200] [--size 2048 4096 8192] [--skip-conversation]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django_setup import setup_django, use_model_server

setup_django()

from asgiref.sync import async_to_sync  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from model_server import BenchModelServer  # noqa: E402
from report import Report  # noqa: E402

from chat.models import Checkpoint, ContextEvent, Message, Session, Snapshot  # noqa: E402  # noqa: E402
from chat.services.compression import compression_run, compression_running  # noqa: E402
from chat.services.sessions import session_create  # noqa: E402
from chat.services.snapshots import snapshot_create  # noqa: E402
from chat.services.turn import TurnSend, turn_take  # noqa: E402
from engine.llm.embedded import MODEL_NAME, EmbeddedBackend  # noqa: E402
from engine.llm.gateway import Gateway  # noqa: E402
from engine.llm.ollama_backend import OllamaBackend  # noqa: E402

# The truncate strategy calls no model; this gateway only counts tokens (the estimate).
NO_LLM = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host="http://127.0.0.1:9"))
TOPICS = ["the login form", "password hashing", "JWT expiry", "refresh tokens", "rate limits", "audit logs"]


class RecordingGateway(Gateway):
    def __init__(self, embedded: EmbeddedBackend) -> None:
        super().__init__(mode="embedded", embedded=embedded, ollama=None)
        # Every call, chat turns and summaries alike: (exact prompt tokens, reply cap, num_ctx).
        self.prompts: list[tuple[int, int, int]] = []

    def send(self, request, *, on_queued=None):  # type: ignore[no-untyped-def]
        assert self.embedded is not None
        self.prompts.append((self.embedded.count_prompt_tokens(request.messages), request.max_tokens, request.num_ctx))
        return super().send(request, on_queued=on_queued)


def conversation(owner, turns: int, size: int, server_url: str) -> str:  # type: ignore[no-untyped-def]
    """Run the conversation at ``size``, print what it shows, and return its row of the report's table."""
    import chat.services.compression.run as compression

    gateway = RecordingGateway(EmbeddedBackend(host=server_url))
    compression.get_gateway = lambda: gateway  # type: ignore[assignment,attr-defined]
    session = session_create(
        owner=owner,
        model=MODEL_NAME,
        context_size=size,
        system_prompt="You are a concise security engineer.",
        settings={"compression": {"summary_max_tokens": 256}},
    )
    chat_seconds = 0.0
    started = time.perf_counter()
    with override_settings(OLLM_REPLY_MAX_TOKENS=64, OLLM_CONTEXT_DEFAULTS={"sampling": {"temperature": 0.0}}):
        for index in range(turns):
            text = f"{index}: explain {TOPICS[index % len(TOPICS)]} in detail."
            t0 = time.perf_counter()
            async_to_sync(turn_take)(session_id=session.pk, variant=TurnSend(text), gateway=gateway)
            chat_seconds += time.perf_counter() - t0
    while compression_running(session_id=session.pk):
        time.sleep(0.2)
    wall = time.perf_counter() - started
    done = ContextEvent.objects.filter(session=session, type__in=["compressed", "rollover-complete"]).order_by("id")
    saved = [e.payload["tokens_before"] - e.payload["tokens_after"] for e in done]
    compress_seconds = sum(e.payload.get("duration_ms", 0) for e in done) / 1000
    largest = max(p for p, _, _ in gateway.prompts)
    largest_with_reply = max(p + r for p, r, _ in gateway.prompts)
    over = sum(1 for p, r, n in gateway.prompts if p + r > n)
    rollovers = sum(1 for e in done if e.type == "rollover-complete")
    errors = ContextEvent.objects.filter(session=session, type="compression-error").count()
    print(f"== {turns} turns at {size // 1024}K (num_ctx {session.max_tokens:,}) with {MODEL_NAME}")
    print(f"compressions: {len(done)} ({rollovers} rollovers), errors: {errors}")
    print(
        f"largest prompt: {largest:,} tokens; largest prompt + reply cap: {largest_with_reply:,} "
        f"(num_ctx {session.max_tokens:,}); calls over num_ctx: {over} of {len(gateway.prompts)}"
    )
    if saved:
        print(
            f"tokens saved per compression: median {statistics.median(saved):,.0f}, min {min(saved):,}, "
            f"max {max(saved):,}"
        )
    print(
        f"time: {wall:.0f} s wall; turns {chat_seconds:.0f} s (waits for compressions included); "
        f"compressions {compress_seconds:.0f} s ({compress_seconds / wall:.0%} of the wall time, in the background)"
    )
    # The call with the largest prompt + reply cap: its prompt and its cap.
    fullest_prompt, fullest_cap, _ = max(gateway.prompts, key=lambda call: call[0] + call[1])
    tokens_saved = (
        f"median {statistics.median(saved):,.0f} ({min(saved):,}-{max(saved):,})" if saved else "no compression"
    )
    return (
        f"| {size // 1024}K ({session.max_tokens:,}) | {len(done)} ({rollovers} rollovers), {errors} errors "
        f"| **{over}** of {len(gateway.prompts)} | {fullest_prompt:,} + {fullest_cap} = {largest_with_reply:,} "
        f"| {tokens_saved} | {wall:,.0f} s | {compress_seconds / wall:.0%} ({compress_seconds:.0f} s) |"
    )


def overhead(owner, history: int, rounds: int = 5) -> float:  # type: ignore[no-untyped-def]
    """Median ms of one truncate-strategy compression in a session with ``history`` messages."""
    timings = []
    for _ in range(rounds):
        # An Ollama model: the truncate strategy calls no model, so none is loaded.
        session = session_create(
            owner=owner,
            model="llama3.2:3b",
            context_size=8192,
            settings={"compression": {"strategy": "truncate", "summary_max_tokens": 64}},
        )
        old = Checkpoint.objects.create(
            session=session,
            number=1,
            level=0,
            first_position=1,
            last_position=history,
            summary="old",
            original_tokens=history * 20,
            current_tokens=10,
        )
        Message.objects.bulk_create(
            Message(
                session=session,
                position=i + 1,
                role="assistant" if i % 2 else "user",
                content=f"old {i}",
                tokens=20,
                # Old user messages went behind the ultra checkpoint in rollovers, as the rest did.
                compressed_into=old,
                context_version=1,
            )
            for i in range(history)
        )
        session.compression_count, session.context_version = 1, 1
        session.save(update_fields=["compression_count", "context_version"])
        # The snapshot an earlier compression would have taken.
        snapshot_create(session=session, kind=Snapshot.Kind.AUTO, reason="earlier compression")
        # The same active context in every session: 40 messages, 6,000 tokens.
        Message.objects.bulk_create(
            Message(
                session=session,
                position=history + i + 1,
                role="assistant" if i % 2 else "user",
                content="An answer with some detail. " * 20,
                tokens=150,
                context_version=2,
            )
            for i in range(40)
        )
        Session.objects.filter(pk=session.pk).update(context_version=2)
        # A history grows over weeks, with SQLite checkpointing its WAL as it goes;
        # the bulk insert above would otherwise leave it all in the WAL.
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        t0 = time.perf_counter()
        outcome = compression_run(session_id=session.pk, reason="bench", force=True, gateway=NO_LLM)
        timings.append((time.perf_counter() - t0) * 1000)
        assert outcome.status == "compressed", outcome
    return statistics.median(timings)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--size", type=int, nargs="+", default=[4096], choices=[2048, 4096, 8192])
    parser.add_argument("--skip-conversation", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()
    report = Report("conversation")
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user(username="bench")
    if not args.skip_conversation:
        rows = []
        # One server for every size: its context holds the largest.
        with BenchModelServer(n_ctx=max(4096, *args.size)) as server:
            use_model_server(server.url)
            for size in args.size:
                rows.append(conversation(owner, args.turns, size, server.url))
        report.print(
            f"\n== {args.turns} turns through {MODEL_NAME} at each size, replies capped at 64 tokens, "
            "summaries at 256; every call counted exactly"
        )
        report.print(
            "| size (num_ctx) | compressions | calls over num_ctx | largest prompt + reply cap "
            "| tokens saved per compression | wall time | compressions' share of it |"
        )
        report.print("|---|---:|---:|---:|---:|---:|---:|")
        for row in rows:
            report.print(row)
    if not args.skip_overhead:
        report.print("\n== non-LLM cost of one compression (truncate strategy, the same 40-message active context)")
        report.print("| messages in the history | one compression (median of 5) |")
        report.print("|---:|---:|")
        for history in (1_000, 10_000):
            report.print(f"| {history:,} | {overhead(owner, history):.1f} ms |")
    report.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
