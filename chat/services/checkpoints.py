"""Applying a compression: the one transaction that changes the active context.

The LLM work (summaries, aging) happens before, outside any transaction; this
function receives its results and applies them all or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from chat.models import Checkpoint, CheckpointRevision, EventType, Message, Session
from chat.selectors.context import (
    active_checkpoints,
    active_messages,
    checkpoint_view,
    session_budget,
    session_window,
)
from chat.services.events import event_record
from chat.services.facts import carried_facts, ledger_fit, staying_text, ultra_ledger_share
from chat.services.reliability import session_refresh_reliability
from engine.core.aging import Level
from engine.core.budget import Budget
from engine.core.ledger import Ledger
from engine.core.ranges import MessageRange, join_ranges
from engine.core.retention import Fact, facts_from_json, facts_to_json, measure_retention
from engine.core.text import storable_text
from engine.core.tokens import TokenCounter
from engine.core.window import chat_messages, render_checkpoint
from engine.resources import TiktokenCounter

# An event lists this many of the facts its checkpoint lost (the revision keeps them all).
MISSING_IN_EVENT = 50


class CompressionConflict(RuntimeError):
    """The state changed since the compression was planned; nothing was applied."""


@dataclass(frozen=True)
class CheckpointDraft:
    summary: str
    strategy: str = Checkpoint.Strategy.SUMMARIZE
    key_decisions: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    facts: tuple[Fact, ...] = ()
    ledger: Ledger = field(default_factory=Ledger)
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgedSummary:
    checkpoint_id: int
    to_level: Level
    summary: str
    how: str = "summarize"
    # The size the aging plan asked for (reported in the event; None: not planned, e.g. a restore).
    target_tokens: int | None = None


@dataclass(frozen=True)
class MergedSummary:
    """The oldest checkpoints, oldest first, that become one ultra checkpoint."""

    checkpoint_ids: tuple[int, ...]
    summary: str
    how: str = "summarize"
    target_tokens: int | None = None


@dataclass
class _Revised:
    """A checkpoint changed in this transaction: its revision is written once every change
    is applied, so that it is measured on the prompt the next call sends."""

    checkpoint: Checkpoint
    reason: CheckpointRevision.Reason
    dropped: tuple[Fact, ...] = ()
    event: EventType | None = None
    payload: dict[str, Any] = field(default_factory=dict)


def _prompt_text(session: Session) -> str:
    return "\n".join(content for _, content in chat_messages(session_window(session=session)))


def _revise_all(session: Session, revised: Sequence[_Revised]) -> None:
    """Record each changed checkpoint's new version, with its retention measured on the next
    prompt: the share of the facts of every message it stands for that the prompt still holds
    (in its own text, another checkpoint's, the pinned block or the active messages).

    Precondition: every change of the transaction is applied, inside it."""
    prompt = _prompt_text(session)
    for item in revised:
        checkpoint = item.checkpoint
        retention = measure_retention(facts_from_json(checkpoint.facts), prompt)
        checkpoint.retention = retention.score
        Checkpoint.objects.filter(pk=checkpoint.pk).update(retention=retention.score)
        CheckpointRevision.objects.create(
            checkpoint=checkpoint,
            level=checkpoint.level,
            tokens=checkpoint.current_tokens,
            summary=checkpoint.summary,
            reason=item.reason,
            retention=retention.score,
            facts_total=retention.total,
            facts_kept=retention.kept,
            missing_facts=facts_to_json(retention.missing),
            ledger_dropped=facts_to_json(item.dropped),
        )
        if item.event is not None:
            missing = [fact.text for fact in retention.missing[:MISSING_IN_EVENT]]
            event_record(
                session=session,
                type=item.event,
                payload={**item.payload, "retention": retention.score, "missing": missing},
            )


def _last_position(session: Session) -> int:
    return Message.objects.filter(session=session).aggregate(last=Max("position"))["last"] or 0


def _count(checkpoint: Checkpoint, counter: TokenCounter) -> int:
    """A checkpoint costs what its rendered text (summary and structured fields) costs."""
    return counter.count(render_checkpoint(checkpoint_view(checkpoint))).tokens


def _planned(target_tokens: int | None) -> dict[str, int]:
    """The aging plan's target for an event, when there was one."""
    return {} if target_tokens is None else {"target_tokens": target_tokens}


def _age(
    checkpoint: Checkpoint,
    *,
    to_level: Level,
    summary: str,
    how: str,
    counter: TokenCounter,
    target_tokens: int | None = None,
) -> _Revised:
    """A new summary at ``to_level``; the ledger and structured fields stay as they are."""
    before = {"level": checkpoint.level, "tokens": checkpoint.current_tokens}
    checkpoint.level = to_level
    checkpoint.summary = storable_text(summary)  # the model's text
    checkpoint.current_tokens = tokens = _count(checkpoint, counter)
    checkpoint.compression_count += 1
    checkpoint.compressed_at = timezone.now()
    checkpoint.save()
    return _Revised(
        checkpoint,
        CheckpointRevision.Reason.AGED,
        event=EventType.CHECKPOINT_AGED,
        payload={
            "checkpoint": checkpoint.id,
            "number": checkpoint.number,
            "from_level": before["level"],
            "to_level": int(to_level),
            "tokens_before": before["tokens"],
            "tokens_after": tokens,
            "how": how,
            **_planned(target_tokens),
        },
    )


def _merge(
    session: Session,
    checkpoints: list[Checkpoint],
    *,
    summary: str,
    how: str,
    counter: TokenCounter,
    target_tokens: int | None = None,
    others_tokens: int = 0,
) -> _Revised:
    """The oldest checkpoint carries the merged text and the joined ledgers, within what the
    session's memory leaves beside the ``others_tokens`` of the checkpoints that stay; the others
    point at it and leave the context."""
    carrier, others = checkpoints[0], checkpoints[1:]
    tokens_before = sum(cp.current_tokens for cp in checkpoints)
    from_level = carrier.level
    carrier.message_range = join_ranges(cp.message_range for cp in checkpoints)
    carrier.level = Level.ULTRA
    carrier.summary = storable_text(summary)
    carrier.original_tokens = sum(cp.original_tokens for cp in checkpoints)
    carrier.compression_count += 1
    carrier.compressed_at = timezone.now()
    carried = carried_facts(checkpoints)
    carrier.facts = facts_to_json(carried.facts)
    carrier.key_decisions = list(dict.fromkeys(d for cp in checkpoints for d in cp.key_decisions))
    carrier.files_modified = list(dict.fromkeys(f for cp in checkpoints for f in cp.files_modified))
    carrier.next_steps = checkpoints[-1].next_steps
    ledger = ledger_fit(
        session=session,
        facts=carried.ledger,
        shown=[carrier.summary, *carrier.key_decisions, *carrier.files_modified],
        beside=staying_text(active_messages(session=session)),
        share=ultra_ledger_share(
            session=session, summary_tokens=counter.count(carrier.summary).tokens, others_tokens=others_tokens
        ),
    )
    carrier.ledger = facts_to_json(ledger.entries)
    carrier.current_tokens = tokens = _count(carrier, counter)
    carrier.save()
    Checkpoint.objects.filter(pk__in=[cp.pk for cp in others]).update(merged_into=carrier)
    return _Revised(
        carrier,
        CheckpointRevision.Reason.MERGED,
        dropped=ledger.dropped,
        event=EventType.CHECKPOINT_AGED,
        payload={
            "checkpoint": carrier.id,
            "number": carrier.number,
            "merged": [cp.id for cp in checkpoints],
            "from_level": from_level,
            "to_level": int(Level.ULTRA),
            "tokens_before": tokens_before,
            "tokens_after": tokens,
            "ledger_dropped": len(ledger.dropped),
            "how": how,
            **_planned(target_tokens),
        },
    )


@transaction.atomic
def checkpoint_carry_over(*, checkpoint: Checkpoint, ledger: Ledger, counter: TokenCounter) -> Checkpoint:
    """Save a checkpoint made outside a compression (the one a continued session starts
    with) with its ledger, counted, with its first revision, and the session's reliability refreshed."""
    checkpoint.ledger = facts_to_json(ledger.entries)
    checkpoint.current_tokens = _count(checkpoint, counter)
    checkpoint.save()
    _revise_all(checkpoint.session, [_Revised(checkpoint, CheckpointRevision.Reason.CREATED, ledger.dropped)])
    session_refresh_reliability(session=checkpoint.session)
    return checkpoint


def _outcome_payload(session: Session, before: Budget, reliability: float, draft: CheckpointDraft) -> dict[str, Any]:
    """What a compression or rollover did to the budget, for its event."""
    after = session_budget(session=session)
    return {
        "tokens_before": before.used,
        "tokens_after": after.used,
        "available_before": before.available,
        "available_after": after.available,
        "reliability": round(reliability, 4),
        **draft.payload,
    }


@transaction.atomic
def compression_commit(
    *,
    session: Session,
    message_ids: Sequence[int],
    draft: CheckpointDraft,
    aged: Sequence[AgedSummary] = (),
    merged: MergedSummary | None = None,
    counter: TokenCounter | None = None,
) -> Checkpoint:
    """Create the new level-3 checkpoint over ``message_ids``, apply the aging
    results, count the compression and write the events, in one transaction.

    Locks the session row first, so two compressions of one session never
    interleave. Raises CompressionConflict (and changes nothing) when a
    message is already compressed or belongs elsewhere, or a checkpoint to
    age has left the active context.
    """
    counter = counter or TiktokenCounter()
    locked = Session.objects.select_for_update().get(pk=session.pk)
    before = session_budget(session=locked)

    messages = list(Message.objects.filter(session=locked, pk__in=message_ids).order_by("position"))
    if not messages or len(messages) != len(set(message_ids)):
        raise CompressionConflict("some messages to compress are not in this session")
    if any(m.compressed_into_id is not None or m.excluded_from_context for m in messages):
        raise CompressionConflict("some messages left the active context meanwhile")
    if any(m.role not in (Message.Role.ASSISTANT, Message.Role.TOOL) for m in messages):
        raise CompressionConflict("only assistant messages and tool outputs are compressed")
    current = {cp.id: cp for cp in active_checkpoints(session=locked)}
    touched = [a.checkpoint_id for a in aged] + list(merged.checkpoint_ids if merged else ())
    if any(cp_id not in current for cp_id in touched):
        raise CompressionConflict("a checkpoint to age is no longer in the active context")

    revised = [
        _age(
            current[result.checkpoint_id],
            to_level=result.to_level,
            summary=result.summary,
            how=result.how,
            target_tokens=result.target_tokens,
            counter=counter,
        )
        for result in aged
    ]
    if merged is not None:
        revised.append(
            _merge(
                locked,
                [current[cp_id] for cp_id in merged.checkpoint_ids],
                summary=merged.summary,
                how=merged.how,
                target_tokens=merged.target_tokens,
                counter=counter,
                # The checkpoints that stay, and the new one with its ledger's share.
                others_tokens=sum(cp.current_tokens for i, cp in current.items() if i not in merged.checkpoint_ids)
                + counter.count(draft.summary).tokens
                + sum(counter.count(fact.text).tokens for fact in draft.ledger.entries),
            )
        )

    locked.compression_count += 1
    checkpoint = Checkpoint(
        session=locked,
        number=locked.compression_count,
        level=Level.RECENT,
        first_position=messages[0].position,
        last_position=messages[-1].position,
        summary=storable_text(draft.summary),
        strategy=draft.strategy,
        original_tokens=sum(m.tokens for m in messages),
        key_decisions=list(draft.key_decisions),
        files_modified=list(draft.files_modified),
        next_steps=list(draft.next_steps),
        facts=facts_to_json(draft.facts),
        ledger=facts_to_json(draft.ledger.entries),
    )
    checkpoint.current_tokens = _count(checkpoint, counter)
    checkpoint.save()
    Message.objects.filter(pk__in=[m.pk for m in messages]).update(
        compressed_into=checkpoint, context_version=locked.next_context_version()
    )
    Session.objects.filter(pk=locked.pk).update(
        compression_count=locked.compression_count, compressed_through=_last_position(locked)
    )
    revised.append(
        _Revised(
            checkpoint,
            CheckpointRevision.Reason.CREATED,
            draft.ledger.dropped,
            event=EventType.CHECKPOINT_CREATED,
            payload={
                "checkpoint": checkpoint.id,
                "number": checkpoint.number,
                "range": checkpoint.range_label,
                "original_tokens": checkpoint.original_tokens,
                "tokens": checkpoint.current_tokens,
            },
        )
    )
    _revise_all(locked, revised)
    reliability = session_refresh_reliability(session=locked)
    event_record(
        session=locked,
        type=EventType.COMPRESSED,
        payload={
            "checkpoint": checkpoint.id,
            "compression": checkpoint.number,
            "strategy": checkpoint.strategy,
            "messages": len(messages),
            **_outcome_payload(locked, before, reliability, draft),
        },
    )
    # Only now, with every write done, does the caller's object change.
    session.compression_count = locked.compression_count
    session.reliability_score = reliability
    return checkpoint


@transaction.atomic
def rollover_commit(
    *,
    session: Session,
    checkpoint_ids: Sequence[int],
    message_ids: Sequence[int],
    draft: CheckpointDraft,
    counter: TokenCounter | None = None,
) -> Checkpoint:
    """Merge active checkpoints and the oldest active messages, user messages
    included, into one ultra checkpoint, in one transaction.

    The messages stay in the full history (``compressed_into`` the ultra
    checkpoint). Locks the session row first; raises CompressionConflict and
    changes nothing when the state moved on since the rollover was planned.
    """
    counter = counter or TiktokenCounter()
    locked = Session.objects.select_for_update().get(pk=session.pk)
    before = session_budget(session=locked)
    messages = list(
        Message.objects.filter(
            session=locked, pk__in=message_ids, compressed_into__isnull=True, excluded_from_context=False
        ).order_by("position")
    )
    if len(messages) != len(set(message_ids)):
        raise CompressionConflict("some messages to roll over left the active context meanwhile")
    current = {cp.id: cp for cp in active_checkpoints(session=locked)}
    if any(cp_id not in current for cp_id in checkpoint_ids):
        raise CompressionConflict("a checkpoint to roll over is no longer in the active context")
    checkpoints = sorted((current[cp_id] for cp_id in checkpoint_ids), key=lambda cp: cp.number)
    if not checkpoints and not messages:
        raise CompressionConflict("nothing to roll over")

    locked.compression_count += 1
    before_level = checkpoints[0].level if checkpoints else None
    tokens_before = sum(cp.current_tokens for cp in checkpoints) + sum(m.tokens for m in messages)
    moved = [MessageRange(messages[0].position, messages[-1].position)] if messages else []
    carrier = checkpoints[0] if checkpoints else Checkpoint(session=locked, number=locked.compression_count)
    carrier.level = Level.ULTRA
    carrier.message_range = join_ranges([*(cp.message_range for cp in checkpoints), *moved])
    carrier.summary = storable_text(draft.summary)
    carrier.strategy = draft.strategy
    carrier.original_tokens = sum(cp.original_tokens for cp in checkpoints) + sum(m.tokens for m in messages)
    carrier.key_decisions = list(draft.key_decisions)
    carrier.files_modified = list(draft.files_modified)
    carrier.next_steps = list(draft.next_steps)
    carrier.facts = facts_to_json(draft.facts)
    carrier.ledger = facts_to_json(draft.ledger.entries)
    if checkpoints:
        carrier.compression_count += 1
        carrier.compressed_at = timezone.now()
    carrier.current_tokens = _count(carrier, counter)
    carrier.save()
    Checkpoint.objects.filter(pk__in=[cp.pk for cp in checkpoints[1:]]).update(merged_into=carrier)
    Message.objects.filter(pk__in=[m.pk for m in messages]).update(
        compressed_into=carrier, context_version=locked.next_context_version()
    )
    Session.objects.filter(pk=locked.pk).update(
        compression_count=locked.compression_count, compressed_through=_last_position(locked)
    )
    _revise_all(
        locked,
        [
            _Revised(
                carrier,
                CheckpointRevision.Reason.MERGED if checkpoints else CheckpointRevision.Reason.CREATED,
                draft.ledger.dropped,
                event=EventType.CHECKPOINT_AGED if checkpoints else EventType.CHECKPOINT_CREATED,
                payload={
                    "checkpoint": carrier.id,
                    "number": carrier.number,
                    "merged": [cp.id for cp in checkpoints],
                    "range": carrier.range_label,
                    "original_tokens": carrier.original_tokens,
                    "from_level": before_level,
                    "to_level": int(Level.ULTRA),
                    "tokens": carrier.current_tokens,
                    "tokens_before": tokens_before,
                    "tokens_after": carrier.current_tokens,
                },
            )
        ],
    )
    reliability = session_refresh_reliability(session=locked)
    event_record(
        session=locked,
        type=EventType.ROLLOVER_COMPLETE,
        payload={
            "checkpoint": carrier.id,
            "compression": locked.compression_count,
            "checkpoints_merged": len(checkpoints),
            "messages": len(messages),
            "user_messages": sum(1 for m in messages if m.role == Message.Role.USER),
            **_outcome_payload(locked, before, reliability, draft),
        },
    )
    session.compression_count = locked.compression_count
    session.reliability_score = reliability
    return carrier
