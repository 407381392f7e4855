"""What stands in for the messages a compression replaces: the summaries the model is asked for
(within their targets, guarded against inflation and repetition), the deterministic extract
where none can stand or none is asked for (a small model's), and the facts the checkpoint keeps
beside them.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections

from chat.models import Session
from chat.services.checkpoints import CheckpointDraft
from chat.services.events import progress_publish
from chat.services.facts import ledger_fit
from engine.core.budget import MIN_SHRINK, prompt_room
from engine.core.config import Strategy
from engine.core.ledger import LEDGER_LABEL, Ledger, render_ledger
from engine.core.prompts import strip_scaffolding
from engine.core.reliability import is_small_model, parameter_size_from_tag
from engine.core.repetition import repetition
from engine.core.retention import Fact, measure_retention
from engine.core.text import plural
from engine.core.tokens import TokenCounter
from engine.core.truncate import fact_extract, shorten_extractive
from engine.core.window import CheckpointView, render_checkpoint
from engine.llm import ChatMessage, ChatRequest, Gateway, LLMError, Sampling
from engine.resources import count_text_tokens

logger = logging.getLogger(__name__)

# Summaries are asked for at their target; output above this share of it is shortened.
TARGET_SLACK = 1.25
# The share of the room a ledger fitted with cl100k counts may fill, for what no count sees (separators, joins).
LEDGER_FIT_MARGIN = 0.97
# What a checkpoint's heading line ("[Checkpoint 2 · Messages 4-9 · level 3]") costs, about.
HEADING_TOKENS = 16
# The ``how`` of a small model's checkpoint: it is never asked for a summary (issue 45: on the benchmarks,
# the summaries of models under 1B parameters never kept more facts than the extract).
SMALL_MODEL_EXTRACT = "extract: a small model's summaries do not help"


def reconnect_if_broken() -> None:
    """Replace a database connection that broke while the LLM was writing (the database restarted,
    failed over, or a proxy dropped it), so the next write reconnects instead of failing on it."""
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.connection is not None and not connection.in_atomic_block and not connection.is_usable():
        connection.close()


@dataclass(frozen=True)
class Shrunk:
    """A text made smaller: by the model (``summarize``) or by the deterministic extract
    (``truncate``), whatever the session asked for, and ``how`` it went (why the extract, if it
    stood in for a summary)."""

    text: str
    strategy: Strategy
    how: str


class Summarizer:
    """The LLM calls of one compression, each capped to its target and to what the context leaves;
    ``extractive``: why none is made this time, the extract standing in for every summary (as it
    always does for a small model, ``small``)."""

    def __init__(
        self, session: Session, gateway: Gateway, counter: TokenCounter, *, extractive: str | None = None
    ) -> None:
        self.session = session
        self.gateway = gateway
        self.counter = counter
        self.model = session.summarizer
        self.num_ctx = session.max_tokens
        self.extractive = extractive
        self._queued_said = ""

    def tokens(self, text: str) -> int:
        return self.counter.count(text).tokens

    def fit(self, prompt: str, target: int) -> tuple[str, int]:
        """``prompt``, shortened if it leaves no room for ``target`` tokens of reply, and its token count."""
        room = prompt_room(self.num_ctx, reply_tokens=target)
        tokens = self.gateway.count_prompt([ChatMessage("user", prompt)], self.model).tokens
        if tokens <= room:
            return prompt, tokens
        shortened = shorten_extractive(prompt, max(room - 16, 16), self.tokens)
        return shortened, self.gateway.count_prompt([ChatMessage("user", shortened)], self.model).tokens

    async def _say_queued(self, ahead: int) -> None:
        """Open pages show the compression waiting for the model while it does, and when it starts."""
        text = (
            f"Compression queued for the model: {plural(ahead, 'request')} ahead (chat turns go first)…"
            if ahead
            else "Compression running on the model…"
        )
        if text == self._queued_said:  # the queue repeats the place every second while it waits
            return
        self._queued_said = text
        await sync_to_async(progress_publish)(session_id=self.session.pk, text=text)

    def ask(self, prompt: str, target: int, *, repeat_penalty: float | None = None) -> str:
        """The model's answer to ``prompt`` within ``target`` tokens; ``repeat_penalty`` (None: the
        backend's default) curbs a model that loops."""
        prompt, prompt_tokens = self.fit(prompt, target)
        max_tokens = max(1, min(target, self.num_ctx - prompt_tokens))
        request = ChatRequest(
            [ChatMessage("user", prompt)],
            model=self.model,
            num_ctx=self.num_ctx,
            max_tokens=max_tokens,
            sampling=Sampling(temperature=0.0, repeat_penalty=repeat_penalty),
            background=True,  # chat turns go first, for a while (OLLM_BACKGROUND_MAX_WAIT_SECONDS)
        )
        completion = async_to_sync(self.gateway.complete)(request, on_queued=self._say_queued)
        reconnect_if_broken()  # the call may have outlasted the database connection
        result = completion.result
        if result.sent_prompt_tokens is not None:
            # A summary of what the server kept of its source would pass for a summary of all of it.
            raise LLMError(
                f"the model server evaluated only {result.prompt_tokens:,} of the about {result.sent_prompt_tokens:,} "
                f"tokens of the summary request: it allocated a smaller context than the {self.num_ctx:,} asked"
            )
        return completion.text.strip()

    # A summary that repeats itself is asked for once more with this repeat penalty (Ollama's option,
    # llama.cpp's sampler over the recent tokens): enough to break a small model's loops.
    REPEAT_PENALTY = 1.3

    def flaw(self, summary: str, source_tokens: int, target: int) -> str | None:
        """Why ``summary`` cannot stand (empty, repetitive, not ``MIN_SHRINK`` smaller than its source
        or well over its target), or None."""
        if not summary:
            return "empty"
        repeated = repetition(summary)
        if repeated is not None:
            return f"repetitive summary ({repeated})"
        summary_tokens = self.tokens(summary)
        if summary_tokens <= source_tokens * (1 - MIN_SHRINK) and summary_tokens <= target * TARGET_SLACK:
            return None
        return f"{summary_tokens} tokens for {source_tokens} (target {target})"

    def extract(self, texts: Sequence[str], max_tokens: int, besides: Sequence[str] = ()) -> str:
        """The deterministic extract of ``texts``: their fact-bearing clauses within ``max_tokens`` but
        for those ``besides`` holds (the checkpoint's ledger), or, when none is left, their sentences."""
        return fact_extract(list(texts), max_tokens, self.tokens, besides=besides) or shorten_extractive(
            "\n".join(texts), max_tokens, self.tokens
        )

    @property
    def small(self) -> bool:
        """Whether the summarizer is a small model, whose summaries never keep more than the extract."""
        same = self.model == self.session.model
        return is_small_model(self.session.model_parameter_size_b if same else parameter_size_from_tag(self.model))

    def asks(self, strategy: Strategy) -> bool:
        """Whether ``shrink`` asks the model for a summary: the session's ``strategy`` is ``summarize``,
        the model is not set aside this time (``extractive``) and it is not a small one."""
        return strategy == "summarize" and self.extractive is None and not self.small

    def shrink(
        self, texts: Sequence[str], prompt: str, target: int, *, strategy: Strategy, besides: Sequence[str] = ()
    ) -> Shrunk:
        """A shorter version of ``texts`` within ``target`` tokens, what made it, and how.

        The model is asked for a summary only when ``asks``; else the deterministic extract stands,
        and ``how`` says why: the model is set aside (``extractive``), the session asks for
        ``truncate``, or the model is a small one, whose summaries keep no more facts than the
        extract (``SMALL_MODEL_EXTRACT``).
        The prompt's scaffolding a model echoes (the guard, "PART n:") is taken out first.
        The inflation guard: a summary that is empty, not ``MIN_SHRINK`` smaller than
        its source, or well over its target is replaced by the deterministic extract.
        The repetition guard: one that repeats itself (``core.repetition``) is
        asked for once more with a repeat penalty; if that one cannot stand
        either, the extract replaces it. ``besides``: clauses the checkpoint's ledger holds already,
        which an extract leaves out.
        """
        text = "\n".join(texts)
        source_tokens = self.tokens(text)
        # Room for the checkpoint's heading and fields, so that the whole checkpoint frees MIN_SHRINK.
        extract_tokens = min(target, max(int(source_tokens * (1 - MIN_SHRINK)) - HEADING_TOKENS, 1))
        if self.extractive is not None:
            return Shrunk(self.extract(texts, extract_tokens, besides), "truncate", f"extractive: {self.extractive}")
        if strategy != "summarize":
            return Shrunk(self.extract(texts, extract_tokens, besides), "truncate", "truncate")
        if self.small:
            return Shrunk(self.extract(texts, extract_tokens, besides), "truncate", SMALL_MODEL_EXTRACT)
        summary = strip_scaffolding(self.ask(prompt, target))
        how = "summarize"
        why = self.flaw(summary, source_tokens, target)
        if why is not None and why.startswith("repetitive"):
            logger.info("session %s: %s; asking again with a repeat penalty", self.session.pk, why)
            penalty = f"repeat penalty {self.REPEAT_PENALTY}"
            summary = strip_scaffolding(self.ask(prompt, target, repeat_penalty=self.REPEAT_PENALTY))
            again = self.flaw(summary, source_tokens, target)
            how = f"summarize: retried with {penalty} after a {why}"
            why = None if again is None else f"{why}; with {penalty}: {again}"
        if why is not None:
            return Shrunk(self.extract(texts, extract_tokens, besides), "truncate", f"truncate: {why}")
        return Shrunk(summary, "summarize", how)


@dataclass(frozen=True)
class KeptFacts:
    view: CheckpointView
    shrunk: Shrunk
    facts: tuple[Fact, ...]
    ledger: Ledger
    payload: dict[str, Any]

    @property
    def how(self) -> str:
        return self.shrunk.how

    def draft(self, *, trigger: str, started: float, goal_updates: Sequence[str] = ()) -> CheckpointDraft:
        """The checkpoint to commit, with what its event reports (how, trigger, duration, ledger,
        and the ``goal_updates`` its summary made)."""
        return CheckpointDraft(
            summary=self.view.summary,
            strategy=self.shrunk.strategy,
            key_decisions=self.view.key_decisions,
            files_modified=self.view.files_modified,
            next_steps=self.view.next_steps,
            facts=self.facts,
            ledger=self.ledger,
            payload={
                "how": self.how,
                "trigger": trigger,
                "duration_ms": round((time.perf_counter() - started) * 1000),
                **self.payload,
                **({"goal_updates": list(goal_updates)} if goal_updates else {}),
            },
        )


def keep_facts(
    session: Session,
    view: CheckpointView,
    facts: tuple[Fact, ...],
    *,
    ledger_facts: Sequence[Fact],
    shrunk: Shrunk,
    replaced_tokens: int,
    count: Callable[[str], int],
    beside: str,
    share: int | None = None,
    spare: int = 0,
) -> KeptFacts:
    """The checkpoint's ledger: ``ledger_facts`` (clauses, oldest first) within the tier's share,
    but for what the checkpoint shows already, and within what leaves the checkpoint ``MIN_SHRINK``
    smaller than the ``replaced_tokens`` it stands in for (``count``: their tokenizer). ``facts``:
    the reference facts of everything the checkpoint stands for, on which the summary alone is measured;
    ``beside``: the text of the messages that stay in the context beside the checkpoint (``ledger_fit``);
    ``share``: the ledger's share of the memory (``ledger_fit``'s default: one checkpoint's); ``spare``:
    tokens the ledger leaves unused besides, when a first fit left the checkpoint too large."""
    room = int(replaced_tokens * (1 - MIN_SHRINK)) - count(render_checkpoint(view)) - count(LEDGER_LABEL)
    # The ledger is fitted with cl100k counts, one call for all its candidates; ``count`` may read the same
    # text as more tokens (the model's tokenizer): the room shrinks by that ratio, measured on the candidates,
    # and a little more for the separators, so that the checkpoint frees what it must.
    sample = render_ledger(fact.text for fact in ledger_facts)
    ratio = LEDGER_FIT_MARGIN * min(1.0, count_text_tokens(sample) / max(1, count(sample))) if sample else 1.0
    ledger = ledger_fit(
        session=session,
        facts=ledger_facts,
        shown=[view.summary, *view.key_decisions, *view.files_modified],
        beside=beside,
        room=int(room * ratio),
        share=share,
        ratio=ratio,
        spare=math.ceil(spare * ratio),
    )
    summary_alone = measure_retention(facts, render_checkpoint(replace(view, key_decisions=(), files_modified=())))
    return KeptFacts(
        view=replace(view, ledger=tuple(f.text for f in ledger.entries)),
        shrunk=shrunk,
        facts=facts,
        ledger=ledger,
        payload={
            "retention_summary": round(summary_alone.score, 4),
            "facts_total": len(facts),
            "ledger_entries": len(ledger.entries),
            "ledger_tokens": count_text_tokens(render_ledger(f.text for f in ledger.entries)),
            "ledger_dropped": len(ledger.dropped),
        },
    )


# Why a checkpoint was made smaller than its first fit, or a rollover took over from a compression.
TOO_LARGE = f"the checkpoint would not free {float(MIN_SHRINK):.0%} of what it replaces"
# How many times a checkpoint's ledger is refitted, each time without the tokens the last fit went over by.
FIT_ROUNDS = 3


def checkpoint_shortfall(kept: KeptFacts, summarizer: Summarizer, *, before_tokens: int) -> int:
    """How many tokens the checkpoint ``kept`` is over what frees ``MIN_SHRINK`` of ``before_tokens`` (0: none)."""
    allowed = math.floor(before_tokens * (1 - MIN_SHRINK))
    return max(0, summarizer.tokens(render_checkpoint(kept.view)) - allowed)


def checkpoint_fit(
    keep: Callable[[Shrunk, int], KeptFacts], shrunk: Shrunk, summarizer: Summarizer, *, before_tokens: int
) -> KeptFacts:
    """The checkpoint ``keep`` makes of ``shrunk``, refitted with a smaller ledger while it would not free
    ``MIN_SHRINK`` of the ``before_tokens`` it replaces: the ledger is fitted in cl100k counts and rendered
    with headers, so the model's count of the whole can come out a few tokens over. ``keep``'s second
    argument is the tokens the ledger leaves unused."""
    kept = keep(shrunk, 0)
    spare = 0
    for _ in range(FIT_ROUNDS):
        over = checkpoint_shortfall(kept, summarizer, before_tokens=before_tokens)
        if not over or not kept.ledger.entries:
            break
        spare += over
        kept = keep(shrunk, spare)
    return kept


def checkpoint_fit_or_extract(
    keep: Callable[[Shrunk, int], KeptFacts],
    shrunk: Shrunk,
    summarizer: Summarizer,
    *,
    texts: Sequence[str],
    besides: Sequence[str],
    extract_target: int,
    before_tokens: int,
) -> KeptFacts:
    """``checkpoint_fit`` of ``shrunk``; while that would not free ``MIN_SHRINK`` either, the extract of ``texts``
    (but for the ledger's clauses, ``besides``) in its place: first at ``extract_target`` when ``shrunk`` is
    a model's summary, then smaller by what the last went over by. Still too large after that, it is
    returned as it is: the caller rolls over or refuses it."""
    kept = checkpoint_fit(keep, shrunk, summarizer, before_tokens=before_tokens)
    if checkpoint_shortfall(kept, summarizer, before_tokens=before_tokens) and shrunk.strategy == "summarize":
        extract = Shrunk(summarizer.extract(texts, extract_target, besides), "truncate", f"extract: {TOO_LARGE}")
        kept = checkpoint_fit(keep, extract, summarizer, before_tokens=before_tokens)
    over = checkpoint_shortfall(kept, summarizer, before_tokens=before_tokens)
    smaller = summarizer.tokens(kept.shrunk.text) - over
    if over and smaller > 0:
        extract = Shrunk(summarizer.extract(texts, smaller, besides), "truncate", kept.shrunk.how)
        kept = checkpoint_fit(keep, extract, summarizer, before_tokens=before_tokens)
    return kept
