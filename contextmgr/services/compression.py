"""The compression coordinator: when to compress, what, with which summaries, and rollover.

``compression_run`` calls the LLM between its reads and its one writing
transaction (``compression_commit`` / ``rollover_commit``), so it must not be
called inside a transaction. A lease on the session row keeps it to one
compression per session at a time, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal
from uuid import UUID

from asgiref.sync import async_to_sync, sync_to_async
from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from chat.models import Message, Session
from contextmgr.core.aging import CheckpointInfo, Level, plan_aging
from contextmgr.core.backoff import Backoff
from contextmgr.core.budget import MIN_SHRINK, Budget, prompt_room, shrink_shortfall
from contextmgr.core.clauses import reference_facts
from contextmgr.core.config import (
    ContextConfig,
    SessionLimits,
    Strategy,
    auto_snapshot_due,
    session_limits,
)
from contextmgr.core.ledger import LEDGER_LABEL, Ledger, ledger_budget, render_ledger
from contextmgr.core.markers import SummaryOutput, marker_facts, split_summary
from contextmgr.core.prompts import (
    PromptMessage,
    build_aging_prompt,
    build_goal_summary_prompt,
    build_merge_prompt,
    build_summary_prompt,
    strip_scaffolding,
)
from contextmgr.core.reliability import is_small_model, parameter_size_from_tag
from contextmgr.core.repetition import repetition
from contextmgr.core.retention import Fact, measure_retention
from contextmgr.core.selection import (
    ContextMessage,
    nothing_to_compress_reason,
    rollover_due,
    rollover_skip_reason,
    select_for_compression,
    select_for_rollover,
)
from contextmgr.core.text import plural
from contextmgr.core.tokens import TokenCounter
from contextmgr.core.truncate import fact_extract, shorten_extractive
from contextmgr.core.window import CheckpointView, render_checkpoint
from contextmgr.llm import ChatMessage, Gateway, LLMError, Sampling, get_gateway
from contextmgr.llm.types import ContextOverflow, ModelNotFound
from contextmgr.models import ContextEvent, EventType, Snapshot
from contextmgr.resources import count_text_tokens
from contextmgr.selectors import (
    active_checkpoints,
    active_goal,
    active_messages,
    goal_view,
    session_budget,
    session_config,
)
from contextmgr.services.checkpoints import (
    AgedSummary,
    CheckpointDraft,
    MergedSummary,
    carried_facts,
    clause_facts,
    compression_commit,
    ledger_fit,
    rollover_commit,
)
from contextmgr.services.events import event_record, progress_publish
from contextmgr.services.goals import goal_apply_summary
from contextmgr.services.lease import (
    LeaseHeartbeat,
    lease_acquire,
    lease_held,
    lease_held_by,
    lease_release,
    lease_take_over,
)
from contextmgr.services.snapshots import snapshot_create

logger = logging.getLogger(__name__)

# Summaries are asked for at their target; output above this share of it is shortened.
TARGET_SLACK = 1.25
# What a checkpoint's heading line ("[Checkpoint 2 · Messages 4-9 · level 3]") costs, about.
HEADING_TOKENS = 16


@dataclass(frozen=True)
class CompressionOutcome:
    status: Literal["compressed", "rolled-over", "skipped", "error"]
    reason: str
    checkpoint_id: int | None = None
    # Seconds until the next attempt of a background compression the model failed; None: none follows.
    retry_in: float | None = None


def session_effective_limits(
    session: Session, config: ContextConfig | None = None, budget: Budget | None = None
) -> SessionLimits:
    """The reply cap, preserved tail, summary and rollover targets this session uses, which
    follow its context size (``contextmgr.core.config.session_limits``)."""
    config = config or session_config(session)
    budget = budget or session_budget(session=session)
    return session_limits(
        config.compression,
        max_tokens=session.max_tokens,
        system_prompt_tokens=budget.system_prompt_tokens,
        available_tokens=budget.available,
        reply_max_configured=settings.OLLM_REPLY_MAX_TOKENS,
        keeps_checkpoints=not session.profile.tier.rolls_over,
    )


def compression_running(*, session_id: UUID) -> bool:
    """Whether a compression (or a restore) of the session holds its lease right now."""
    return lease_held(session_id=session_id)


def _record_skip(session: Session, reason: str, **payload: object) -> CompressionOutcome:
    event_record(session=session, type=EventType.COMPRESSION_SKIPPED, payload={"reason": reason, **payload})
    return CompressionOutcome("skipped", reason)


def compression_run(
    *,
    session_id: UUID,
    reason: str = "trigger",
    force: bool = False,
    rollover: bool = False,
    gateway: Gateway | None = None,
    extractive: str | None = None,
    take_over: bool = False,
    attempt: int | None = None,
) -> CompressionOutcome:
    """Compress the session if it is due (or ``force``), or record why not;
    ``rollover`` goes straight to a rollover.

    ``extractive``: why the model is not asked this time (its compression failed, or is
    stuck): every text is shrunk by the deterministic extract, and the checkpoint's ``how``
    says why. ``take_over``: take the session's lease even from a compression that holds it
    (``lease_take_over``). ``attempt``: the number of this attempt of a background compression
    that is retried by itself (``compression_attempt``): when the model fails it, its event
    says when the next attempt runs (``retry_in``, ``attempt``, ``attempts``) or that none
    will (``gave_up``), and the outcome carries ``retry_in``; None: nothing retries this run.

    Precondition: not inside a transaction. Everything the LLM produces is
    applied in one transaction at the end; any failure before or during it
    leaves the history and the active context exactly as they were, and is
    recorded as ``compression-error``. A rollover that follows a compression
    is a transaction of its own: if it fails, the compression stands and the
    error is recorded.
    """
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        # Deleted while its compression waited in the queue: there is nothing left to compress.
        return CompressionOutcome("skipped", "the session was deleted")
    config = session_config(session)
    if not config.compression.enabled:
        return _record_skip(session, "compression is turned off for this session", trigger=reason)
    budget = session_budget(session=session)
    if not force and not budget.compression_due:
        return _record_skip(
            session,
            f"not needed: {budget.active_tokens:,} active tokens, trigger at {budget.trigger_at:,}",
            trigger=reason,
        )
    if not force and not rollover and session.compression_count and _no_new_messages(session):
        # The troubleshooting section's "rapid re-compression": a compression that could not
        # free enough room rolls over instead; it is never simply run again on the same messages
        # by itself. Compress now (``force``) takes whatever the selection still allows.
        return _record_skip(session, f"no new messages since compression {session.compression_count}", trigger=reason)
    token = lease_take_over(session_id=session.pk) if take_over else lease_acquire(session_id=session.pk)
    if token is None:
        return _record_skip(session, "another compression of this session is running", trigger=reason)
    started = time.perf_counter()
    heartbeat = LeaseHeartbeat(session_id=session.pk, token=token)
    try:
        with heartbeat:
            gateway = gateway or get_gateway()
            if rollover:
                summarizer = _Summarizer(session, gateway, gateway.token_counter(session.model), extractive=extractive)
                outcome = _rollover(session, config, summarizer, reason=reason, started=started)
            else:
                outcome = _compress(session, config, gateway, reason=reason, started=started, extractive=extractive)
    except Exception as exc:
        logger.exception("compression of session %s failed", session.pk)
        _reconnect_if_broken()  # so that the error is recorded once the database is back
        if heartbeat.token is None or not lease_held_by(session_id=session.pk, token=heartbeat.token):
            # Another run took the session over (a turn that could wait no longer): what failed
            # here is superseded, not to be retried.
            return _record_skip(
                session, f"superseded by another compression, which took this one's lease ({exc})", trigger=reason
            )
        retry = _retry_plan(exc, attempt, worth_it=not force or budget.compression_due)
        event_record(
            session=session,
            type=EventType.COMPRESSION_ERROR,
            payload={
                "reason": str(exc) or type(exc).__name__,
                "error": type(exc).__name__,
                "trigger": reason,
                **retry,
            },
        )
        return CompressionOutcome("error", str(exc) or type(exc).__name__, retry_in=retry.get("retry_in"))
    else:
        if outcome.status in ("compressed", "rolled-over"):
            _retry_forget(session.pk)  # a retry still pending would find nothing due
        return outcome
    finally:
        if heartbeat.token is not None:
            lease_release(session_id=session.pk, token=heartbeat.token)


def _reconnect_if_broken() -> None:
    """Replace a database connection that broke while the LLM was writing (the database restarted,
    failed over, or a proxy dropped it), so the next write reconnects instead of failing on it."""
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.connection is not None and not connection.in_atomic_block and not connection.is_usable():
        connection.close()


def _no_new_messages(session: Session) -> bool:
    return not Message.objects.filter(session=session, position__gt=session.compressed_through).exists()


@dataclass(frozen=True)
class Shrunk:
    """A text made smaller: by the model (``summarize``) or by the deterministic extract
    (``truncate``), whatever the session asked for, and ``how`` it went (why the extract, if it
    stood in for a summary)."""

    text: str
    strategy: Strategy
    how: str


class _Summarizer:
    """The LLM calls of one compression, each capped to its target and to what the context leaves;
    ``extractive``: why none is made this time, the extract standing in for every summary."""

    def __init__(
        self, session: Session, gateway: Gateway, counter: TokenCounter, *, extractive: str | None = None
    ) -> None:
        self.session = session
        self.gateway = gateway
        self.counter = counter
        self.model = session.summarizer
        self.num_ctx = session.max_tokens
        self.extractive = extractive

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
        await sync_to_async(progress_publish)(session_id=self.session.pk, text=text)

    def ask(self, prompt: str, target: int, *, repeat_penalty: float | None = None) -> str:
        """The model's answer to ``prompt`` within ``target`` tokens; ``repeat_penalty`` (None: the
        backend's default) curbs a model that loops."""
        prompt, prompt_tokens = self.fit(prompt, target)
        max_tokens = max(1, min(target, self.num_ctx - prompt_tokens))
        completion = async_to_sync(self.gateway.complete)(
            [ChatMessage("user", prompt)],
            model=self.model,
            num_ctx=self.num_ctx,
            max_tokens=max_tokens,
            sampling=Sampling(temperature=0.0, repeat_penalty=repeat_penalty),
            background=True,  # chat turns go first, for a while (OLLM_BACKGROUND_MAX_WAIT_SECONDS)
            on_queued=self._say_queued,
        )
        _reconnect_if_broken()  # the call may have outlasted the database connection
        result = completion.result
        if result.sent_prompt_tokens is not None:
            # A summary of what the server kept of its source would pass for a summary of all of it.
            raise LLMError(
                f"the model server evaluated only {result.prompt_tokens:,} of the about {result.sent_prompt_tokens:,} "
                f"tokens of the summary request: it allocated a smaller context than the {self.num_ctx:,} asked"
            )
        return completion.text.strip()

    # A summary that repeats itself is asked for once more with this repeat penalty (Ollama's option,
    # llama.cpp's sampler over the last 64 tokens): 1.3 broke the SmolLM2-135M loops seen here.
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

    def extract(self, texts: Sequence[str], max_tokens: int) -> str:
        """The deterministic extract of ``texts``: their fact-bearing clauses within ``max_tokens``,
        or, when none states a fact, their sentences."""
        return fact_extract(list(texts), max_tokens, self.tokens) or shorten_extractive(
            "\n".join(texts), max_tokens, self.tokens
        )

    @property
    def small(self) -> bool:
        """Whether the summarizer is a small model, whose summaries must earn their place."""
        same = self.model == self.session.model
        return is_small_model(self.session.model_parameter_size_b if same else parameter_size_from_tag(self.model))

    def shrink(self, texts: Sequence[str], prompt: str, target: int, *, strategy: Strategy) -> Shrunk:
        """A shorter version of ``texts`` within ``target`` tokens, what made it, and how.

        The prompt's scaffolding a model echoes (the guard, "PART n:") is taken out first.
        The inflation guard: a summary that is empty, not ``MIN_SHRINK`` smaller than
        its source, or well over its target is replaced by the deterministic extract.
        The repetition guard: one that repeats itself (``core.repetition``) is
        asked for once more with a repeat penalty; if that one cannot stand
        either, the extract replaces it. A small model's summary (``small``) stands
        only if it keeps at least as many of the reference facts as the extract.
        ``how`` says which, and why.
        """
        text = "\n".join(texts)
        source_tokens = self.tokens(text)
        # Room for the checkpoint's heading and fields, so that the whole checkpoint frees MIN_SHRINK.
        extract_tokens = min(target, max(int(source_tokens * (1 - MIN_SHRINK)) - HEADING_TOKENS, 1))
        if self.extractive is not None:
            return Shrunk(self.extract(texts, extract_tokens), "truncate", f"extractive: {self.extractive}")
        if strategy != "summarize":
            return Shrunk(self.extract(texts, extract_tokens), "truncate", "truncate")
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
            return Shrunk(self.extract(texts, extract_tokens), "truncate", f"truncate: {why}")
        if self.small:
            # Only a small model's summary is compared with the extract; a larger one's stands as written.
            extract = self.extract(texts, extract_tokens)
            reference = reference_facts([text])
            by_summary = measure_retention(reference, summary).kept
            by_extract = measure_retention(reference, extract).kept
            if by_summary < by_extract:
                return Shrunk(
                    extract,
                    "truncate",
                    f"extract: the small model's summary kept {by_summary} of {len(reference)} facts, "
                    f"the extract {by_extract}",
                )
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


def _keep_facts(
    session: Session,
    view: CheckpointView,
    facts: tuple[Fact, ...],
    *,
    ledger_facts: Sequence[Fact],
    shrunk: Shrunk,
    replaced_tokens: int,
    count: Callable[[str], int],
) -> KeptFacts:
    """The checkpoint's ledger: ``ledger_facts`` (clauses, oldest first) within the tier's share,
    but for what the checkpoint shows already, and within what leaves the checkpoint ``MIN_SHRINK``
    smaller than the ``replaced_tokens`` it stands in for (``count``: their tokenizer). ``facts``:
    the reference facts of everything the checkpoint stands for, on which the summary alone is measured."""
    room = int(replaced_tokens * (1 - MIN_SHRINK)) - count(render_checkpoint(view)) - count(LEDGER_LABEL)
    ledger = ledger_fit(
        session=session,
        facts=ledger_facts,
        shown=[view.summary, *view.key_decisions, *view.files_modified],
        room=room,
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


def _shrink_skip(
    session: Session, kept: KeptFacts, summarizer: _Summarizer, *, before_tokens: int, reason: str
) -> CompressionOutcome | None:
    """The skip recorded when the checkpoint ``kept`` would not make the ``before_tokens`` it
    replaces smaller by ``MIN_SHRINK``; None when it does. Nothing is committed then."""
    after = summarizer.tokens(render_checkpoint(kept.view))
    why = shrink_shortfall(before_tokens=before_tokens, after_tokens=after)
    if why is None:
        return None
    return _record_skip(session, f"not committed: {why}", trigger=reason, how=kept.how)


def _joined(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    """Both, in order, each once."""
    return tuple(dict.fromkeys([*first, *second]))


def _transcript(messages: Sequence[Message]) -> list[PromptMessage]:
    return [PromptMessage(m.role, m.content) for m in messages]


def _context_messages(messages: Sequence[Message]) -> list[ContextMessage]:
    """The active messages as the core's selections see them; a tool call and its results share a group."""
    return [ContextMessage(id=m.id, role=m.role, tokens=m.tokens, group=m.tool_call_id or None) for m in messages]  # type: ignore[arg-type]


def _compress(
    session: Session, config: ContextConfig, gateway: Gateway, *, reason: str, started: float, extractive: str | None
) -> CompressionOutcome:
    counter = gateway.token_counter(session.model)
    summarizer = _Summarizer(session, gateway, counter, extractive=extractive)
    budget = session_budget(session=session)
    if session.profile.tier.rolls_over:
        return _rollover(session, config, summarizer, reason=reason, started=started)

    active = list(active_messages(session=session))
    limits = session_effective_limits(session, config, budget)
    selection = select_for_compression(_context_messages(active), preserve_recent=limits.preserve_recent)
    if not selection:
        if rollover_due(budget):
            return _rollover(session, config, summarizer, reason=reason, started=started)
        return _record_skip(
            session, nothing_to_compress_reason(_context_messages(active), preserve_recent=limits.preserve_recent)
        )

    _auto_snapshot(session, config, f"Before compression {session.compression_count + 1}")

    chosen = [m for m in active if m.id in set(selection.message_ids)]
    transcript = _transcript(chosen)
    goal = active_goal(session=session)
    prompt = build_goal_summary_prompt(goal_view(goal=goal), transcript) if goal else build_summary_prompt(transcript)
    target = limits.summary_max_tokens
    how = " extractively" if extractive is not None else ""
    progress_publish(
        session_id=session.pk,
        text=f"Compressing {plural(len(chosen), 'message')} ({selection.tokens:,} tokens){how}…",
    )
    shrunk = summarizer.shrink([m.content for m in chosen], prompt, target, strategy=config.compression.strategy)
    markers = marker_facts(m.content for m in chosen)
    # Only the model's goal-aware summary has marker lines of its own; an extract's are the
    # replies', which were applied when they arrived.
    output = split_summary(shrunk.text) if goal and shrunk.strategy == "summarize" else SummaryOutput(shrunk.text)
    facts = reference_facts(m.content for m in chosen)
    kept = _keep_facts(
        session,
        CheckpointView(
            number=session.compression_count + 1,
            level=Level.RECENT,
            range_label="",
            summary=output.prose,
            key_decisions=_joined(markers.key_decisions, (d.description for d in output.decisions)),
            files_modified=_joined(markers.files_modified, (a.path for a in output.artifacts)),
            next_steps=_joined(markers.next_steps, output.next_steps),
        ),
        facts,
        ledger_facts=clause_facts(m.content for m in chosen),
        shrunk=shrunk,
        replaced_tokens=selection.tokens,
        count=summarizer.tokens,
    )
    skipped = _shrink_skip(session, kept, summarizer, before_tokens=selection.tokens, reason=reason)
    if skipped is not None:
        return skipped

    checkpoints = list(active_checkpoints(session=session))
    plan = plan_aging(
        [CheckpointInfo(id=cp.id, level=Level(cp.level), tokens=cp.current_tokens) for cp in checkpoints],
        summary_max_tokens=target,
        max_checkpoints=session.profile.tier.max_checkpoints,
    )
    by_id = {cp.id: cp for cp in checkpoints}
    aged = []
    for number, step in enumerate(plan.steps, start=1):
        progress_publish(session_id=session.pk, text=f"Aging checkpoint {number} of {len(plan.steps)}…")
        source = by_id[step.checkpoint_id].summary
        shorter = summarizer.shrink(
            [source],
            build_aging_prompt(source, to_level=step.to_level, target_tokens=step.target_tokens),
            step.target_tokens,
            strategy=config.compression.strategy,
        )
        aged.append(AgedSummary(step.checkpoint_id, step.to_level, shorter.text, shorter.how, step.target_tokens))
    merged = None
    if plan.merge is not None:
        parts = [by_id[i].summary for i in plan.merge.checkpoint_ids]
        progress_publish(session_id=session.pk, text=f"Merging {len(parts)} checkpoints into the ultra checkpoint…")
        joined = summarizer.shrink(
            parts,
            build_merge_prompt(parts, target_tokens=plan.merge.target_tokens),
            plan.merge.target_tokens,
            strategy=config.compression.strategy,
        )
        merged = MergedSummary(plan.merge.checkpoint_ids, joined.text, joined.how, plan.merge.target_tokens)

    with transaction.atomic():  # the goal updates stand or fall with the compression
        goal_updates = goal_apply_summary(session=session, output=output)
        checkpoint = compression_commit(
            session=session,
            message_ids=selection.message_ids,
            draft=kept.draft(trigger=reason, started=started, goal_updates=goal_updates),
            aged=aged,
            merged=merged,
            counter=counter,
        )
    if rollover_due(session_budget(session=session)):
        # Even compressed, the uncompressible part leaves no room: roll over.
        try:
            return _rollover(session, config, summarizer, reason="no room after compression", started=started)
        except Exception as exc:
            # The compression itself is applied; only the rollover (its own transaction) failed.
            logger.exception("rollover after compression of session %s failed", session.pk)
            event_record(
                session=session,
                type=EventType.COMPRESSION_ERROR,
                payload={
                    "reason": f"the rollover after compression {checkpoint.number} failed: {exc}",
                    "error": type(exc).__name__,
                    "trigger": "no room after compression",
                },
            )
    return CompressionOutcome("compressed", kept.how, checkpoint.id)


def _rollover(
    session: Session, config: ContextConfig, summarizer: _Summarizer, *, reason: str, started: float
) -> CompressionOutcome:
    """Merge every checkpoint and older messages into one ultra checkpoint.

    ``select_for_rollover`` chooses the messages: assistant and tool output first,
    oldest first, until the active conversation is back under half the trigger;
    user messages only when the never-compressed part alone is at or over the
    trigger (the oldest, as many as needed). The newest message always stays.
    """
    session.refresh_from_db()
    budget = session_budget(session=session)
    checkpoints = list(active_checkpoints(session=session))
    active = list(active_messages(session=session))
    target = session_effective_limits(session, config, budget).rollover_target
    ultra_tokens = target + ledger_budget(max_tokens=session.max_tokens, tier=session.profile.tier)
    plan = select_for_rollover(_context_messages(active), budget, ultra_tokens=ultra_tokens)
    skip = rollover_skip_reason(plan, checkpoints=len(checkpoints))
    if skip is not None:
        return _record_skip(session, skip)
    taken = set(plan.message_ids)
    moved = [m for m in active if m.id in taken]
    _auto_snapshot(session, config, "Before rollover")
    parts = [cp.summary for cp in checkpoints] + ["\n".join(f"{m.role}: {m.content}" for m in moved)]
    parts = [part for part in parts if part]
    progress_publish(
        session_id=session.pk,
        text=f"Rolling over: {plural(len(checkpoints), 'checkpoint')} and {plural(len(moved), 'message')}"
        f" ({plan.user_messages:,} of them yours)…",
    )
    prompt = build_merge_prompt(parts, target_tokens=target)
    shrunk = summarizer.shrink(
        [cp.summary for cp in checkpoints] + [m.content for m in moved],
        prompt,
        target,
        strategy=config.compression.strategy,
    )
    markers = marker_facts(m.content for m in moved)
    carried = carried_facts(checkpoints, moved, with_summaries=True)
    replaced = sum(cp.current_tokens for cp in checkpoints) + sum(m.tokens for m in moved)
    kept = _keep_facts(
        session,
        CheckpointView(
            number=session.compression_count + 1,
            level=Level.ULTRA,
            range_label="",
            summary=shrunk.text,
            key_decisions=tuple(
                dict.fromkeys([d for cp in checkpoints for d in cp.key_decisions] + list(markers.key_decisions))
            ),
            files_modified=tuple(
                dict.fromkeys([f for cp in checkpoints for f in cp.files_modified] + list(markers.files_modified))
            ),
            next_steps=markers.next_steps or tuple(checkpoints[-1].next_steps if checkpoints else ()),
        ),
        carried.facts,
        ledger_facts=carried.ledger,
        shrunk=shrunk,
        replaced_tokens=replaced,
        count=summarizer.tokens,
    )
    skipped = _shrink_skip(session, kept, summarizer, before_tokens=replaced, reason=reason)
    if skipped is not None:
        return skipped
    checkpoint = rollover_commit(
        session=session,
        checkpoint_ids=[cp.id for cp in checkpoints],
        message_ids=[m.id for m in moved],
        draft=kept.draft(trigger=reason, started=started),
        counter=summarizer.counter,
    )
    return CompressionOutcome("rolled-over", kept.how, checkpoint.id)


# The Celery task (``contextmgr.tasks``) is an entry point above this module: it is sent by name.
COMPRESS_TASK = "contextmgr.tasks.compress_session"


def compression_schedule(*, session_id: UUID, reason: str, force: bool = False) -> None:
    """Run a compression in the background once the current transaction commits
    (``force``: even when the budget does not call for one, as "Compress now" asks); one the
    model fails is tried again by itself (``compression_attempt``).

    With a broker, a Celery worker runs the task ``COMPRESS_TASK``; without one (the
    embedded default) it runs in a thread of this process, so the turn does not wait.
    """

    def enqueue() -> None:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            _in_thread(session_id, name=f"compress-{session_id}", reason=reason, force=force).start()
        else:
            current_app.send_task(COMPRESS_TASK, args=[str(session_id), reason, force])

    transaction.on_commit(enqueue)


def _in_thread(session_id: UUID, *, name: str, delay: float = 0, **attempt: Any) -> threading.Timer:
    """``compression_attempt`` in a daemon thread of this process, ``delay`` seconds after it starts."""

    def run() -> None:
        try:
            compression_attempt(session_id=session_id, **attempt)
        finally:
            # This thread's database connection would otherwise stay open for good.
            connections.close_all()

    timer = threading.Timer(delay, run)
    timer.daemon = True
    timer.name = name
    return timer


def compression_backoff() -> Backoff:
    """The waits before each retry of a compression the model failed (``OLLM_COMPRESSION_RETRY_SECONDS``)."""
    return Backoff.parse(settings.OLLM_COMPRESSION_RETRY_SECONDS)


def _model_failure(exc: Exception) -> bool:
    """Whether ``exc`` is the model's trouble (timed out, unreachable, refused, broke off), which may
    pass; not a model that is missing or a prompt too long for it, which asking again cannot mend,
    nor a bug."""
    return isinstance(exc, LLMError) and not isinstance(exc, ModelNotFound | ContextOverflow)


def _retry_plan(exc: Exception, attempt: int | None, *, worth_it: bool) -> dict[str, Any]:
    """What a ``compression-error`` event of attempt ``attempt`` adds about the next attempt:
    ``retry_in`` (seconds), or ``gave_up`` after the last; nothing when no attempt follows a
    failure of this kind, or when ``worth_it`` is false (a forced run the budget did not call for)."""
    backoff = compression_backoff()
    if attempt is None or not backoff.delays or not worth_it or not _model_failure(exc):
        return {}
    plan: dict[str, Any] = {"attempt": attempt, "attempts": backoff.attempts}
    wait = backoff.after(attempt)
    return {**plan, "retry_in": wait} if wait is not None else {**plan, "gave_up": True}


def _retry_key(session_id: UUID) -> str:
    return f"compression-retry:{session_id}"


# A pending retry is forgotten this long after it was due: its task or thread is lost by then.
RETRY_GRACE_SECONDS = 300


def compression_retry_pending(*, session_id: UUID) -> bool:
    """Whether a retry of a compression the model failed waits to run for the session."""
    return cache.get(_retry_key(session_id)) is not None


# The retries this process waits to run (without a broker): a superseded one stops waiting.
_retry_timers: dict[UUID, threading.Timer] = {}
_retry_timers_lock = threading.Lock()


def _retry_forget(session_id: UUID) -> None:
    cache.delete(_retry_key(session_id))
    with _retry_timers_lock:
        timer = _retry_timers.pop(session_id, None)
    if timer is not None:
        timer.cancel()


def compression_attempt(
    *, session_id: UUID, reason: str, force: bool = False, attempt: int = 1, token: str | None = None
) -> CompressionOutcome:
    """One attempt of a background compression: ``compression_run``, then, when the model failed
    it and the backoff (``compression_backoff``) has a wait left, the next attempt, scheduled to run
    after that wait, never forced (it runs only if the budget still calls for it).

    One retry at most waits per session (the cache holds its ``token``): a retry whose token is no
    longer the pending one was superseded (by a newer attempt, or a compression that succeeded)
    and does nothing.
    """
    if token is not None and cache.get(_retry_key(session_id)) != token:
        return CompressionOutcome("skipped", "superseded: a newer attempt or a compression that succeeded")
    _retry_forget(session_id)
    outcome = compression_run(session_id=session_id, reason=reason, force=force, attempt=attempt)
    if outcome.retry_in is not None:
        _retry_schedule(session_id, reason=reason, attempt=attempt + 1, delay=outcome.retry_in)
    return outcome


def _retry_schedule(session_id: UUID, *, reason: str, attempt: int, delay: float) -> None:
    """Attempt number ``attempt`` in ``delay`` seconds: a Celery task with that countdown, or a
    timer thread of this process without a broker."""
    token = uuid.uuid4().hex
    _retry_forget(session_id)
    cache.set(_retry_key(session_id), token, timeout=delay + RETRY_GRACE_SECONDS)
    if settings.CELERY_TASK_ALWAYS_EAGER:
        timer = _in_thread(
            session_id,
            name=f"compress-retry-{session_id}",
            delay=delay,
            reason=reason,
            force=False,
            attempt=attempt,
            token=token,
        )
        with _retry_timers_lock:
            _retry_timers[session_id] = timer
        timer.start()
    else:
        current_app.send_task(
            COMPRESS_TASK,
            args=[str(session_id), reason, False],
            kwargs={"attempt": attempt, "token": token},
            countdown=delay,
        )


def _auto_snapshot(session: Session, config: ContextConfig, reason: str, *, usage: float | None = None) -> None:
    """The spec's automatic snapshot, when ``contextmgr.core.config.auto_snapshot_due`` says so
    (``usage``: of the available budget, after a message; None just before a compression)."""
    taken = Snapshot.objects.filter(
        session=session, kind=Snapshot.Kind.AUTO, message_count__gt=session.compressed_through
    ).exists
    if auto_snapshot_due(config.snapshots, taken_this_round=taken, usage=usage):
        snapshot_create(session=session, kind=Snapshot.Kind.AUTO, reason=reason)


def compression_maybe_schedule(*, session: Session, budget: Budget | None = None) -> bool:
    """After a message is stored: take the automatic snapshot when usage reaches its threshold,
    and schedule a compression when the budget says it is due.

    ``session``: as read by the caller's request or turn (its settings decide); ``budget``: the
    session's budget, when the caller has just read it (it is read here otherwise).
    """
    config = session_config(session)
    if budget is None:
        budget = session_budget(session=session)
    usage = budget.usage_of_available
    _auto_snapshot(session, config, f"At {round(usage * 100)}% of the available budget", usage=usage)
    if not config.compression.enabled:
        return False
    if not budget.compression_due:
        return False
    if compression_running(session_id=session.pk):
        # The running one is what the budget asks for; a second would only be skipped.
        return False
    if compression_retry_pending(session_id=session.pk):
        # The model failed the last one: its retry waits out the backoff, rather than each new
        # message asking the model again at once.
        return False
    compression_schedule(session_id=session.pk, reason=f"{budget.active_tokens:,} of {budget.trigger_at:,} tokens")
    return True


# The events that end a compression run, whatever came of it.
COMPRESSION_OUTCOMES = (
    EventType.COMPRESSED,
    EventType.ROLLOVER_COMPLETE,
    EventType.COMPRESSION_SKIPPED,
    EventType.COMPRESSION_ERROR,
)
WAIT_POLL_SECONDS = 0.2


async def compression_wait(
    *, session_id: UUID, timeout: float, after_event_id: int | None = None, budget: Budget | None = None
) -> bool:
    """Wait until no compression of the session is running; False if ``timeout`` passed first.
    The one wait for a compression: the turn awaits it (Stop cancels it at once, and it holds no
    thread meanwhile), the API and the terminal chat run it with ``async_to_sync``.

    With ``after_event_id``, also wait for one that is due but may not have taken its lease
    yet: while the budget says one is due and none of its outcome events has been recorded
    since that event, it is still to come. ``budget``: the session's budget as the caller has
    just read it, for the first look.
    """
    deadline = time.monotonic() + timeout
    while True:
        if not await sync_to_async(_compression_pending)(session_id, after_event_id, budget):
            return True
        if time.monotonic() >= deadline:
            return False
        budget = None  # later looks read it again
        await asyncio.sleep(WAIT_POLL_SECONDS)


def _compression_pending(session_id: UUID, after_event_id: int | None, budget: Budget | None) -> bool:
    return compression_running(session_id=session_id) or (
        after_event_id is not None and _compression_to_come(session_id, after_event_id, budget)
    )


def _compression_to_come(session_id: UUID, after_event_id: int, budget: Budget | None) -> bool:
    """Whether the budget says a compression is due and none has ended since ``after_event_id``."""
    if budget is not None and not budget.compression_due:
        return False
    session = Session.objects.get(pk=session_id)
    if not session_config(session).compression.enabled:
        return False
    if not (budget or session_budget(session=session)).compression_due:
        return False
    return not ContextEvent.objects.filter(
        session_id=session_id, id__gt=after_event_id, type__in=COMPRESSION_OUTCOMES
    ).exists()


def compression_failure_since(*, session_id: UUID, after_event_id: int) -> str | None:
    """Why the compression of the session that ended last since event ``after_event_id`` failed;
    None when it did not fail, or none has ended since."""
    last = (
        ContextEvent.objects.filter(session_id=session_id, id__gt=after_event_id, type__in=COMPRESSION_OUTCOMES)
        .order_by("-id")
        .first()
    )
    if last is None or last.type != EventType.COMPRESSION_ERROR:
        return None
    payload = last.payload if isinstance(last.payload, dict) else {}
    return str(payload.get("reason") or payload.get("error") or "no reason recorded")
