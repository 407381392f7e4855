from __future__ import annotations

import asyncio
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.gateway import get_gateway
from engine.llm import ChatMessage, ChatRequest, LLMError


class Command(BaseCommand):
    help = "Show which LLM backend is in use and why, list the models, and stream a short reply."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--model", help="Model to stream from (default: the chosen backend's default).")
        parser.add_argument("--prompt", default="In one sentence: why do long conversations need compression?")
        parser.add_argument("--max-tokens", type=int, default=48)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            asyncio.run(self._check(options))
        except LLMError as exc:
            raise CommandError(str(exc)) from exc

    async def _check(self, options: dict[str, Any]) -> None:
        gateway = get_gateway()
        status = await gateway.status()
        self.stdout.write(f"Backend: {status.backend} (mode {status.mode}): {status.reason}")
        models = await gateway.list_models()
        self.stdout.write("Models:")
        for info in models:
            size = f"{info.parameter_size_b:g}B" if info.parameter_size_b is not None else "size unknown"
            context = f"{info.context_length:,}" if info.context_length else "unknown"
            self.stdout.write(f"  {info.name:<32} {info.backend:<9} {size:<12} context {context}  ({info.family})")
        model = options["model"] or status.default_model
        if model is None:
            raise CommandError("No model is available: start Ollama or install the embedded model (make run).")
        self.stdout.write(f"\n{model} says: ", ending="")
        started = time.perf_counter()
        stream = gateway.send(
            ChatRequest([ChatMessage("user", options["prompt"])], model, num_ctx=2048, max_tokens=options["max_tokens"])
        )
        async for delta in stream:
            self.stdout.write(delta, ending="")
            self.stdout.flush()
        result = stream.result
        assert result is not None
        self.stdout.write(
            f"\n\n{result.prompt_tokens} prompt tokens, {result.completion_tokens} generated "
            f"({result.done_reason}), {result.tokens_per_second:.1f} tokens/s, "
            f"{time.perf_counter() - started:.2f} s in all."
        )
