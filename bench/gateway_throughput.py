"""Tokens/s of the embedded model through the gateway vs llama_cpp called directly.

Same model instance, same prompt, same run, alternating rounds; the figure
compared is decode speed (generated tokens after the first, per second), the
part the gateway's thread and queue could slow down. The gateway must keep
at least 97% of the direct speed.

    .venv/bin/python bench/gateway_throughput.py [--rounds 9] [--tokens 300]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contextmgr.llm.embedded import MODEL_NAME, EmbeddedBackend
from contextmgr.llm.gateway import Gateway
from contextmgr.llm.types import ChatMessage

MESSAGES = [ChatMessage("user", "Count from 1 to 1000, separated by commas.")]
REQUIRED_RATIO = 0.97


def direct_round(backend: EmbeddedBackend, tokens: int) -> float:
    """Decode tokens/s of llama_cpp's own streaming completion."""
    llama = backend._load().llama
    prompt, stops = backend.prompt_for(MESSAGES)
    first = None
    count = 0
    for _chunk in llama.create_completion(prompt, max_tokens=tokens, temperature=0, stream=True, stop=stops):
        count += 1
        if first is None:
            first = time.perf_counter()
    assert first is not None
    return (count - 1) / (time.perf_counter() - first)


async def gateway_round(gateway: Gateway, tokens: int) -> float:
    stream = gateway.chat(MESSAGES, model=MODEL_NAME, num_ctx=4096, max_tokens=tokens, temperature=0)
    first = None
    count = 0
    async for _delta in stream:
        count += 1
        if first is None:
            first = time.perf_counter()
    assert first is not None
    return (count - 1) / (time.perf_counter() - first)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--tokens", type=int, default=300)
    args = parser.parse_args()

    backend = EmbeddedBackend(n_ctx=4096)
    gateway = Gateway(mode="embedded", embedded=backend, ollama=None)
    direct_round(backend, 8)  # load and warm up
    direct, through = [], []
    for _ in range(args.rounds):
        direct.append(direct_round(backend, args.tokens))
        through.append(asyncio.run(gateway_round(gateway, args.tokens)))
    d, g = statistics.median(direct), statistics.median(through)
    # Each gateway round runs right after a direct one; the median of those
    # pairwise ratios is less sensitive to the machine's drift than d / g.
    ratio = statistics.median(t / r for r, t in zip(direct, through, strict=True))
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}")
    print(f"model: {MODEL_NAME}, {args.tokens} tokens per round, {args.rounds} rounds, medians")
    print(f"direct llama_cpp : {d:6.1f} tokens/s  (rounds: {', '.join(f'{x:.1f}' for x in direct)})")
    print(f"through gateway  : {g:6.1f} tokens/s  (rounds: {', '.join(f'{x:.1f}' for x in through)})")
    print(f"ratio            : {ratio:.3f} (median of per-round ratios; required >= {REQUIRED_RATIO})")
    return 0 if ratio >= REQUIRED_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
