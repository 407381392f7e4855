"""The compression coordinator: when to compress, what, with which summaries, and rollover.

``compression_run`` calls the LLM between its reads and its one writing
transaction (``compression_commit`` / ``rollover_commit``), so it must not be
called inside a transaction. A lease on the session row keeps it to one
compression per session at a time, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal
from uuid import UUID

from django.conf import settings
from django.db import transaction

from chat.gateway import get_gateway
from chat.models import EventType, Message, Session
from chat.selectors.context import (
    active_checkpoints,
    active_goal,
    active_messages,
    goal_view,
    session_budget,
    session_config,
)
from chat.services.checkpoints import AgedSummary, MergedSummary, compression_commit, rollover_commit
from chat.services.compression.retry import compression_retry_forget, compression_retry_plan
from chat.services.compression.summaries import (
    HEADING_TOKENS,
    TOO_LARGE,
    KeptFacts,
    Shrunk,
    Summarizer,
    checkpoint_fit_or_extract,
    checkpoint_shortfall,
    keep_facts,
    reconnect_if_broken,
)
from chat.services.events import event_record, progress_publish
from chat.services.facts import carried_facts, clause_facts, ledger_fit, staying_text, ultra_ledger_share
from chat.services.goals import goal_apply_summary
from chat.services.lease import (
    LeaseHeartbeat,
    lease_acquire,
    lease_held_by,
    lease_release,
    lease_take_over,
)
from chat.services.snapshots import snapshot_auto_create
from engine.core.aging import MIN_TARGET_TOKENS, CheckpointInfo, Level, plan_aging
from engine.core.budget import MIN_SHRINK, Budget, shrink_shortfall
from engine.core.clauses import reference_facts
from engine.core.config import ContextConfig, SessionLimits, session_limits
from engine.core.ledger import memory_budget, render_ledger
from engine.core.markers import (
    CHECKPOINT_FILES,
    CHECKPOINT_NEXT_STEPS,
    SummaryOutput,
    marker_facts,
    newest,
    split_summary,
)
from engine.core.prompts import (
    PromptMessage,
    build_aging_prompt,
    build_goal_summary_prompt,
    build_merge_prompt,
    build_summary_prompt,
    format_history,
)
from engine.core.salience import split_said
from engine.core.selection import (
    ContextMessage,
    nothing_to_compress_reason,
    rollover_due,
    rollover_skip_reason,
    select_for_compression,
    select_for_rollover,
)
from engine.core.text import plural, without_urls
from engine.core.window import CheckpointView, render_checkpoint
from engine.llm import Gateway
from engine.resources import count_text_tokens

logger = logging.getLogger(__name__)


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
    follow its context size (``engine.core.config.session_limits``)."""
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
                summarizer = Summarizer(session, gateway, gateway.token_counter(session.model), extractive=extractive)
                outcome = _rollover(session, config, summarizer, reason=reason, started=started)
            else:
                outcome = _compress(session, config, gateway, reason=reason, started=started, extractive=extractive)
    except Exception as exc:
        logger.exception("compression of session %s failed", session.pk)
        reconnect_if_broken()  # so that the error is recorded once the database is back
        if heartbeat.token is None or not lease_held_by(session_id=session.pk, token=heartbeat.token):
            # Another run took the session over (a turn that could wait no longer): what failed
            # here is superseded, not to be retried.
            return _record_skip(
                session, f"superseded by another compression, which took this one's lease ({exc})", trigger=reason
            )
        retry = compression_retry_plan(exc=exc, attempt=attempt, worth_it=not force or budget.compression_due)
        # The owner reads it on the timeline and the chat page: no host's address (the log above has it).
        reason = without_urls(str(exc)) or type(exc).__name__
        event_record(
            session=session,
            type=EventType.COMPRESSION_ERROR,
            payload={
                "reason": reason,
                "error": type(exc).__name__,
                "trigger": reason,
                **retry,
            },
        )
        return CompressionOutcome("error", reason, retry_in=retry.get("retry_in"))
    else:
        if outcome.status in ("compressed", "rolled-over"):
            compression_retry_forget(session_id=session.pk)  # a retry still pending would find nothing due
        return outcome
    finally:
        if heartbeat.token is not None:
            lease_release(session_id=session.pk, token=heartbeat.token)


def _no_new_messages(session: Session) -> bool:
    return not Message.objects.filter(session=session, position__gt=session.compressed_through).exists()


def _shrink_skip(
    session: Session, kept: KeptFacts, summarizer: Summarizer, *, before_tokens: int, reason: str
) -> CompressionOutcome | None:
    """The skip recorded when the checkpoint ``kept`` would not make the ``before_tokens`` it
    replaces smaller by ``MIN_SHRINK``; None when it does. Nothing is committed then."""
    after = summarizer.tokens(render_checkpoint(kept.view))
    why = shrink_shortfall(before_tokens=before_tokens, after_tokens=after)
    if why is None:
        return None
    return _record_skip(session, f"not committed: {why}", trigger=reason, how=kept.how)


def _summary_output(shrunk: Shrunk, *, goal_set: bool) -> SummaryOutput:
    """The summary's parts: only the model's goal-aware summary has marker lines of its own; an extract's
    are the replies', which were applied when they arrived."""
    return split_summary(shrunk.text) if goal_set and shrunk.strategy == "summarize" else SummaryOutput(shrunk.text)


def _joined(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    """Both, in order, each once."""
    return tuple(dict.fromkeys([*first, *second]))


def _transcript(messages: Sequence[Message]) -> list[PromptMessage]:
    return [PromptMessage(m.role, m.content, m.created_at.date()) for m in messages]


def _context_messages(messages: Sequence[Message]) -> list[ContextMessage]:
    """The active messages as the core's selections see them; a tool call and its results share a group."""
    return [ContextMessage(id=m.id, role=m.role, tokens=m.tokens, group=m.tool_call_id or None) for m in messages]  # type: ignore[arg-type]


def _compress(
    session: Session, config: ContextConfig, gateway: Gateway, *, reason: str, started: float, extractive: str | None
) -> CompressionOutcome:
    counter = gateway.token_counter(session.model)
    summarizer = Summarizer(session, gateway, counter, extractive=extractive)
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

    snapshot_auto_create(session=session, config=config, reason=f"Before compression {session.compression_count + 1}")

    taken = set(selection.message_ids)
    chosen = [m for m in active if m.id in taken]
    beside = staying_text(m for m in active if m.id not in taken)
    transcript = _transcript(chosen)
    goal = active_goal(session=session)
    # The model asked (one that can summarize: a small one never is) is asked for the facts of any
    # conversation too, with whom and when.
    prompt = (
        build_goal_summary_prompt(goal_view(goal=goal), transcript, facts=True)
        if goal
        else build_summary_prompt(transcript, facts=True)
    )
    target = limits.summary_max_tokens
    # The ledger is filled first, with its share, so that the clauses it ranks highest outlive aging; where the
    # extract stands (the model is not asked: a small one, set aside, or the session asks for none), it gets
    # what is left of the room a checkpoint may take, and leaves out the ledger's clauses. A model that is
    # asked writes to the spec's target.
    ledger_facts = clause_facts(chosen)
    room = int(selection.tokens * (1 - MIN_SHRINK)) - HEADING_TOKENS
    first = ledger_fit(session=session, facts=ledger_facts, shown=[], beside=beside, room=room)
    held = [split_said(fact.text)[1] for fact in first.entries]
    extract_target = max(MIN_TARGET_TOKENS, min(target, room - count_text_tokens(render_ledger(held))))
    summary_target = target if summarizer.asks(config.compression.strategy) else extract_target
    how = " extractively" if extractive is not None else ""
    progress_publish(
        session_id=session.pk,
        text=f"Compressing {plural(len(chosen), 'message')} ({selection.tokens:,} tokens){how}…",
    )
    shrunk = summarizer.shrink(
        [m.content for m in chosen], prompt, summary_target, strategy=config.compression.strategy, besides=held
    )
    markers = marker_facts(m.content for m in chosen)
    facts = reference_facts(m.content for m in chosen)

    def keep(shrunk: Shrunk, spare: int) -> KeptFacts:
        output = _summary_output(shrunk, goal_set=goal is not None)
        return keep_facts(
            session,
            CheckpointView(
                number=session.compression_count + 1,
                level=Level.RECENT,
                range_label="",
                summary=output.prose,
                key_decisions=_joined(markers.key_decisions, (d.description for d in output.decisions)),
                files_modified=newest(
                    _joined(markers.files_modified, (a.path for a in output.artifacts)), CHECKPOINT_FILES
                ),
                next_steps=newest(_joined(markers.next_steps, output.next_steps), CHECKPOINT_NEXT_STEPS),
            ),
            facts,
            ledger_facts=ledger_facts,
            shrunk=shrunk,
            replaced_tokens=selection.tokens,
            count=summarizer.tokens,
            beside=beside,
            spare=spare,
        )

    kept = checkpoint_fit_or_extract(
        keep,
        shrunk,
        summarizer,
        texts=[m.content for m in chosen],
        besides=held,
        extract_target=extract_target,
        before_tokens=selection.tokens,
    )
    if checkpoint_shortfall(kept, summarizer, before_tokens=selection.tokens) and budget.compression_due:
        # What it chose is too little to free enough (its checkpoint's own lines weigh too much): a rollover
        # takes more, so that the session does not stay over its trigger.
        return _rollover(session, config, summarizer, reason=f"{reason}: {TOO_LARGE}", started=started)
    skipped = _shrink_skip(session, kept, summarizer, before_tokens=selection.tokens, reason=reason)
    if skipped is not None:
        return skipped
    output = _summary_output(kept.shrunk, goal_set=goal is not None)

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
    session: Session, config: ContextConfig, summarizer: Summarizer, *, reason: str, started: float
) -> CompressionOutcome:
    """Merge every checkpoint and older messages into one ultra checkpoint.

    ``select_for_rollover`` chooses the messages: assistant and tool output, oldest
    first, until the active conversation is back under half the trigger; when the
    never-compressed part alone is at or over the trigger, every message oldest
    first, whatever its role, as many as needed. The newest message always stays.
    """
    session.refresh_from_db()
    budget = session_budget(session=session)
    checkpoints = list(active_checkpoints(session=session))
    active = list(active_messages(session=session))
    target = session_effective_limits(session, config, budget).rollover_target
    memory = memory_budget(max_tokens=session.max_tokens, tier=session.profile.tier)
    plan = select_for_rollover(_context_messages(active), budget, ultra_tokens=max(memory, target))
    skip = rollover_skip_reason(plan, checkpoints=len(checkpoints))
    if skip is not None:
        return _record_skip(session, skip)
    taken = set(plan.message_ids)
    moved = [m for m in active if m.id in taken]
    beside = staying_text(m for m in active if m.id not in taken)
    snapshot_auto_create(session=session, config=config, reason="Before rollover")
    parts = [cp.summary for cp in checkpoints] + [format_history(_transcript(moved))]
    parts = [part for part in parts if part]
    progress_publish(
        session_id=session.pk,
        text=f"Rolling over: {plural(len(checkpoints), 'checkpoint')} and {plural(len(moved), 'message')}"
        f" ({plan.user_messages:,} of them yours)…",
    )
    prompt = build_merge_prompt(parts, target_tokens=target, facts=True)
    shrunk = summarizer.shrink(
        [cp.summary for cp in checkpoints] + [m.content for m in moved],
        prompt,
        target,
        strategy=config.compression.strategy,
    )
    markers = marker_facts(m.content for m in moved)
    carried = carried_facts(checkpoints, moved, with_history=True)
    replaced = sum(cp.current_tokens for cp in checkpoints) + sum(m.tokens for m in moved)
    view = CheckpointView(
        number=session.compression_count + 1,
        level=Level.ULTRA,
        range_label="",
        summary=shrunk.text,
        key_decisions=tuple(
            dict.fromkeys([d for cp in checkpoints for d in cp.key_decisions] + list(markers.key_decisions))
        ),
        files_modified=newest(
            [f for cp in checkpoints for f in cp.files_modified] + list(markers.files_modified), CHECKPOINT_FILES
        ),
        next_steps=newest(
            markers.next_steps or (checkpoints[-1].next_steps if checkpoints else ()), CHECKPOINT_NEXT_STEPS
        ),
    )

    def keep(shrunk: Shrunk, spare: int) -> KeptFacts:
        return keep_facts(
            session,
            replace(view, summary=shrunk.text),
            carried.facts,
            ledger_facts=carried.ledger,
            shrunk=shrunk,
            replaced_tokens=replaced,
            count=summarizer.tokens,
            beside=beside,
            share=ultra_ledger_share(session=session, summary_tokens=target),
            spare=spare,
        )

    kept = checkpoint_fit_or_extract(
        keep,
        shrunk,
        summarizer,
        texts=[cp.summary for cp in checkpoints] + [m.content for m in moved],
        besides=(),
        extract_target=target,
        before_tokens=replaced,
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
