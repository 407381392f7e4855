"""The compression coordinator: when to compress, what, with which summaries, and rollover.

``compression_run`` calls the LLM between its reads and its one writing
transaction (``compression_commit`` / ``rollover_commit``), so it must not be
called inside a transaction. A lease on the session row keeps it to one
compression per session at a time, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal
from uuid import UUID

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from chat.models import Message, Session
from contextmgr.core.aging import CheckpointInfo, Level, level_target, plan_aging
from contextmgr.core.budget import Budget
from contextmgr.core.config import ContextConfig, context_config_from_mapping, effective_preserve_recent
from contextmgr.core.markers import marker_facts
from contextmgr.core.prompts import (
    PromptMessage,
    build_aging_prompt,
    build_goal_summary_prompt,
    build_merge_prompt,
    build_missing_facts_prompt,
    build_summary_prompt,
)
from contextmgr.core.retention import Fact, extract_facts, high_value, measure_retention
from contextmgr.core.selection import ContextMessage, select_for_compression
from contextmgr.core.tokens import TokenCounter
from contextmgr.core.truncate import shorten_extractive
from contextmgr.core.window import CheckpointView, render_checkpoint
from contextmgr.llm import ChatMessage, Gateway, get_gateway
from contextmgr.models import Checkpoint, ContextEvent, EventType, Snapshot
from contextmgr.selectors import active_checkpoints, active_goal, active_messages, goal_view, session_budget
from contextmgr.services.checkpoints import (
    AgedSummary,
    CheckpointDraft,
    MergedSummary,
    compression_commit,
    facts_carried,
    rollover_commit,
)
from contextmgr.services.events import event_record, progress_publish
from contextmgr.services.lease import LeaseHeartbeat, lease_acquire, lease_held, lease_release
from contextmgr.services.snapshots import snapshot_create

logger = logging.getLogger(__name__)

# The fewest tokens a reply must have room for before the turn waits for (or runs) a compression.
REPLY_MIN_TOKENS = 32
# Summaries are asked for at their target; output above this share of it is shortened.
TARGET_SLACK = 1.25


@dataclass(frozen=True)
class CompressionOutcome:
    status: Literal["compressed", "rolled-over", "skipped", "error"]
    reason: str
    checkpoint_id: int | None = None


def default_config() -> ContextConfig:
    """The global defaults: the spec's, with ``OLLM_CONTEXT_DEFAULTS`` over them."""
    return context_config_from_mapping(settings.OLLM_CONTEXT_DEFAULTS)


def session_config(session: Session) -> ContextConfig:
    """The session's settings over the global defaults."""
    return context_config_from_mapping(session.settings, base=default_config())


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
) -> CompressionOutcome:
    """Compress the session if it is due (or ``force``), or record why not;
    ``rollover`` goes straight to a rollover.

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
    if not rollover and session.compression_count and _no_new_messages(session):
        # The troubleshooting section's "rapid re-compression": a compression that could not
        # free enough room rolls over instead; it is never simply run again on the same messages.
        return _record_skip(session, f"no new messages since compression {session.compression_count}", trigger=reason)
    token = lease_acquire(session_id=session.pk)
    if token is None:
        return _record_skip(session, "another compression of this session is running", trigger=reason)
    started = time.perf_counter()
    heartbeat = LeaseHeartbeat(session_id=session.pk, token=token)
    try:
        with heartbeat:
            gateway = gateway or get_gateway()
            if rollover:
                summarizer = _Summarizer(session, gateway, gateway.token_counter(session.model))
                return _rollover(session, config, summarizer, reason=reason, started=started)
            return _compress(session, config, gateway, reason=reason, started=started)
    except Exception as exc:
        logger.exception("compression of session %s failed", session.pk)
        _reconnect_if_broken()  # so that the error is recorded once the database is back
        event_record(
            session=session,
            type=EventType.COMPRESSION_ERROR,
            payload={"reason": str(exc) or type(exc).__name__, "error": type(exc).__name__, "trigger": reason},
        )
        return CompressionOutcome("error", str(exc) or type(exc).__name__)
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


class _Summarizer:
    """The LLM calls of one compression, each capped to its target and to what the context leaves."""

    def __init__(self, session: Session, gateway: Gateway, counter: TokenCounter) -> None:
        self.session = session
        self.gateway = gateway
        self.counter = counter
        self.model = session.summarizer
        self.num_ctx = session.max_tokens

    def tokens(self, text: str) -> int:
        return self.counter.count(text).tokens

    def fit(self, prompt: str, target: int) -> tuple[str, int]:
        """``prompt``, shortened if it leaves no room for ``target`` tokens of reply, and its token count."""
        room = self.num_ctx - target - REPLY_MIN_TOKENS
        tokens = self.gateway.count_prompt([ChatMessage("user", prompt)], self.model).tokens
        if tokens <= room:
            return prompt, tokens
        shortened = shorten_extractive(prompt, max(room - 16, 16), self.tokens)
        return shortened, self.gateway.count_prompt([ChatMessage("user", shortened)], self.model).tokens

    def ask(self, prompt: str, target: int) -> str:
        prompt, prompt_tokens = self.fit(prompt, target)
        max_tokens = max(1, min(target, self.num_ctx - prompt_tokens))
        completion = async_to_sync(self.gateway.complete)(
            [ChatMessage("user", prompt)],
            model=self.model,
            num_ctx=self.num_ctx,
            max_tokens=max_tokens,
            temperature=0.0,
            background=True,  # a chat turn on the bundled model goes first
        )
        _reconnect_if_broken()  # the call may have outlasted the database connection
        return completion.text.strip()

    def shrink(self, text: str, prompt: str, target: int, *, strategy: str) -> tuple[str, str]:
        """A summary of ``text`` within ``target`` tokens, and how it was made.

        The inflation guard: a summary that is empty, not smaller than its
        source, or well over its target is replaced by the deterministic extract.
        """
        source_tokens = self.tokens(text)
        if strategy == Checkpoint.Strategy.SUMMARIZE:
            summary = self.ask(prompt, target)
            summary_tokens = self.tokens(summary)
            if summary and summary_tokens < source_tokens and summary_tokens <= target * TARGET_SLACK:
                return summary, "summarize"
            why = "empty" if not summary else f"{summary_tokens} tokens for {source_tokens} (target {target})"
            return shorten_extractive(text, min(target, max(source_tokens - 1, 1)), self.tokens), f"truncate: {why}"
        return shorten_extractive(text, target, self.tokens), "truncate"


@dataclass(frozen=True)
class KeptFacts:
    view: CheckpointView
    how: str
    facts: tuple[Fact, ...]
    payload: dict[str, Any]

    def draft(self, *, trigger: str, started: float) -> CheckpointDraft:
        """The checkpoint to commit, with what its event reports (how, trigger, duration, retention)."""
        return CheckpointDraft(
            summary=self.view.summary,
            strategy=Checkpoint.Strategy.SUMMARIZE if self.how == "summarize" else Checkpoint.Strategy.TRUNCATE,
            key_decisions=self.view.key_decisions,
            files_modified=self.view.files_modified,
            next_steps=self.view.next_steps,
            facts=self.facts,
            payload={
                "how": self.how,
                "trigger": trigger,
                "duration_ms": round((time.perf_counter() - started) * 1000),
                **self.payload,
            },
        )


def _keep_facts(
    summarizer: _Summarizer,
    view: CheckpointView,
    facts: tuple[Fact, ...],
    *,
    source: str,
    prompt: str,
    target: int,
    how: str,
    strategy: str,
) -> KeptFacts:
    """A new summary that lost too many of its messages' facts is asked for once more, with the
    missing facts listed; if it still falls short, the missing decisions and paths are appended
    to the structured fields, which always reach the prompt."""
    threshold = settings.OLLM_RETENTION_THRESHOLD
    first = measure_retention(facts, render_checkpoint(view))
    retention = first
    if retention.score < threshold and how == "summarize":
        retry_prompt = build_missing_facts_prompt(prompt, [fact.text for fact in retention.missing])
        summary, retry_how = summarizer.shrink(source, retry_prompt, target, strategy=strategy)
        retried = replace(view, summary=summary)
        again = measure_retention(facts, render_checkpoint(retried))
        if again.score > retention.score:
            view, how, retention = retried, retry_how, again
    appended = 0
    if retention.score < threshold:
        lost = high_value(retention.missing)
        decisions = tuple(fact.text for fact in lost if fact.kind == "decision")
        paths = tuple(fact.text for fact in lost if fact.kind == "path")
        appended = len(decisions) + len(paths)
        view = replace(
            view,
            key_decisions=tuple(dict.fromkeys(view.key_decisions + decisions)),
            files_modified=tuple(dict.fromkeys(view.files_modified + paths)),
        )
        retention = measure_retention(facts, render_checkpoint(view))
    return KeptFacts(
        view=view,
        how=how,
        facts=facts,
        payload={
            "retention_first": round(first.score, 4),
            "retention": round(retention.score, 4),
            "facts_total": retention.total,
            "facts_kept": retention.kept,
            "facts_appended": appended,
        },
    )


def _transcript(messages: Sequence[Message]) -> list[PromptMessage]:
    return [PromptMessage(m.role, m.content) for m in messages]


def _compress(
    session: Session, config: ContextConfig, gateway: Gateway, *, reason: str, started: float
) -> CompressionOutcome:
    counter = gateway.token_counter(session.model)
    summarizer = _Summarizer(session, gateway, counter)
    budget = session_budget(session=session)
    if session.profile.tier.rolls_over:
        return _rollover(session, config, summarizer, reason=reason, started=started)

    active = list(active_messages(session=session))
    selection = select_for_compression(
        [ContextMessage(id=m.id, role=m.role, tokens=m.tokens, group=m.tool_call_id or None) for m in active],  # type: ignore[arg-type]
        preserve_recent=effective_preserve_recent(config.compression, budget.available),
    )
    if not selection:
        if budget.free < REPLY_MIN_TOKENS or budget.compression_due:
            return _rollover(session, config, summarizer, reason=reason, started=started)
        return _record_skip(session, "nothing to compress: no assistant output outside the preserved recent tokens")

    _auto_snapshot(session, config, f"Before compression {session.compression_count + 1}")

    chosen = [m for m in active if m.id in set(selection.message_ids)]
    transcript = _transcript(chosen)
    text = "\n".join(f"{m.role}: {m.content}" for m in chosen)
    goal = active_goal(session=session)
    prompt = build_goal_summary_prompt(goal_view(goal=goal), transcript) if goal else build_summary_prompt(transcript)
    target = config.compression.summary_max_tokens
    progress_publish(session_id=session.pk, text=f"Compressing {len(chosen)} messages ({selection.tokens:,} tokens)…")
    summary, how = summarizer.shrink(text, prompt, target, strategy=config.compression.strategy)
    facts = marker_facts(m.content for m in chosen)
    kept = _keep_facts(
        summarizer,
        CheckpointView(
            number=session.compression_count + 1,
            level=Level.RECENT,
            range_label="",
            summary=summary,
            key_decisions=facts.key_decisions,
            files_modified=facts.files_modified,
            next_steps=facts.next_steps,
        ),
        extract_facts(m.content for m in chosen),
        source=text,
        prompt=prompt,
        target=target,
        how=how,
        strategy=config.compression.strategy,
    )

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
        shorter, _ = summarizer.shrink(
            source,
            build_aging_prompt(source, to_level=step.to_level, target_tokens=step.target_tokens),
            step.target_tokens,
            strategy=config.compression.strategy,
        )
        aged.append(AgedSummary(step.checkpoint_id, step.to_level, shorter))
    merged = None
    if plan.merge is not None:
        parts = [by_id[i].summary for i in plan.merge.checkpoint_ids]
        progress_publish(session_id=session.pk, text=f"Merging {len(parts)} checkpoints into the ultra checkpoint…")
        joined, _ = summarizer.shrink(
            "\n".join(parts),
            build_merge_prompt(parts, target_tokens=plan.merge.target_tokens),
            plan.merge.target_tokens,
            strategy=config.compression.strategy,
        )
        merged = MergedSummary(plan.merge.checkpoint_ids, joined)

    checkpoint = compression_commit(
        session=session,
        message_ids=selection.message_ids,
        draft=kept.draft(trigger=reason, started=started),
        aged=aged,
        merged=merged,
        counter=counter,
    )
    after = session_budget(session=session)
    if after.free < REPLY_MIN_TOKENS or after.compression_due:
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
    """Merge every checkpoint and the oldest messages (user ones too) into one ultra checkpoint.

    Messages are taken oldest first until the active conversation is back
    under half the trigger; the newest ``preserve_recent`` tokens stay.
    """
    session.refresh_from_db()
    budget = session_budget(session=session)
    checkpoints = list(active_checkpoints(session=session))
    active = list(active_messages(session=session))
    goal_tokens = budget.trigger_at // 2
    keep_from = len(active)
    kept_tokens = 0
    for index in range(len(active) - 1, -1, -1):
        if kept_tokens + active[index].tokens > goal_tokens:
            break
        kept_tokens += active[index].tokens
        keep_from = index
    # The newest message is the one being answered: it always stays.
    keep_from = min(keep_from, max(len(active) - 1, 0))
    # A tool call and its results move together or not at all.
    while (
        0 < keep_from < len(active)
        and active[keep_from].tool_call_id
        and (active[keep_from].tool_call_id == active[keep_from - 1].tool_call_id)
    ):
        keep_from -= 1
    moved = active[:keep_from]
    if not moved and not checkpoints:
        if keep_from == 0:
            return _record_skip(session, "nothing to roll over: the conversation already fits in half the trigger")
        return _record_skip(session, "nothing to roll over: the newest message alone fills the context")
    _auto_snapshot(session, config, "Before rollover")
    parts = [cp.summary for cp in checkpoints] + ["\n".join(f"{m.role}: {m.content}" for m in moved)]
    parts = [part for part in parts if part]
    target = max(level_target(Level.ULTRA, config.compression.summary_max_tokens), 16)
    progress_publish(
        session_id=session.pk, text=f"Rolling over: {len(checkpoints)} checkpoints and {len(moved)} messages…"
    )
    source = "\n".join(parts)
    prompt = build_merge_prompt(parts, target_tokens=target)
    summary, how = summarizer.shrink(source, prompt, target, strategy=config.compression.strategy)
    facts = marker_facts(m.content for m in moved)
    kept = _keep_facts(
        summarizer,
        CheckpointView(
            number=session.compression_count + 1,
            level=Level.ULTRA,
            range_label="",
            summary=summary,
            key_decisions=tuple(
                dict.fromkeys([d for cp in checkpoints for d in cp.key_decisions] + list(facts.key_decisions))
            ),
            files_modified=tuple(
                dict.fromkeys([f for cp in checkpoints for f in cp.files_modified] + list(facts.files_modified))
            ),
            next_steps=facts.next_steps or tuple(checkpoints[-1].next_steps if checkpoints else ()),
        ),
        facts_carried(checkpoints, moved),
        source=source,
        prompt=prompt,
        target=target,
        how=how,
        strategy=config.compression.strategy,
    )
    checkpoint = rollover_commit(
        session=session,
        checkpoint_ids=[cp.id for cp in checkpoints],
        message_ids=[m.id for m in moved],
        draft=kept.draft(trigger=reason, started=started),
        counter=summarizer.counter,
    )
    return CompressionOutcome("rolled-over", kept.how, checkpoint.id)


def compression_schedule(*, session_id: UUID, reason: str, force: bool = False) -> None:
    """Run a compression in the background once the current transaction commits
    (``force``: even when the budget does not call for one, as "Compress now" asks).

    With a broker, a Celery worker runs it; without one (the embedded default)
    the same task runs in a thread of this process, so the turn does not wait.
    """
    from contextmgr.tasks import compress_session

    def run_here() -> None:
        try:
            compress_session.apply(args=[str(session_id), reason, force])
        finally:
            # This thread's database connection would otherwise stay open for good.
            connections.close_all()

    def enqueue() -> None:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            threading.Thread(target=run_here, daemon=True, name=f"compress-{session_id}").start()
        else:
            compress_session.delay(str(session_id), reason, force)

    transaction.on_commit(enqueue)


def _auto_snapshot(session: Session, config: ContextConfig, reason: str) -> None:
    """The spec's automatic snapshot: one per compression round, taken when usage first reaches
    ``auto_threshold`` of the available budget, or just before the compression if none was."""
    if not (config.snapshots.enabled and config.snapshots.auto_create):
        return
    taken = Snapshot.objects.filter(
        session=session, kind=Snapshot.Kind.AUTO, message_count__gt=session.compressed_through
    ).exists()
    if not taken:
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
    if budget.usage_of_available >= config.snapshots.auto_threshold:
        _auto_snapshot(session, config, f"At {round(budget.usage_of_available * 100)}% of the available budget")
    if not config.compression.enabled:
        return False
    if not budget.compression_due:
        return False
    if compression_running(session_id=session.pk):
        # The running one is what the budget asks for; a second would only be skipped.
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


def compression_wait(*, session_id: UUID, after_event_id: int, timeout: float, budget: Budget | None = None) -> bool:
    """Wait until no compression of the session is running or due to start; False if ``timeout`` passed first.

    A compression scheduled after event ``after_event_id`` may not have taken
    its lease yet: while the budget says one is due and none of its outcome
    events has been recorded since, it is still to come. ``budget``: the
    session's budget as the caller has just read it, for the first look.
    """
    deadline = time.monotonic() + timeout
    while True:
        if not compression_running(session_id=session_id) and not _compression_to_come(
            session_id, after_event_id, budget
        ):
            return True
        if time.monotonic() >= deadline:
            return False
        budget = None  # later looks read it again
        time.sleep(WAIT_POLL_SECONDS)


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
