"""Reads of the context manager: budgets, reliability and the state a snapshot holds."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from django.conf import settings
from django.db.models import Max, Q, QuerySet, Sum
from django.shortcuts import get_object_or_404

from chat.gateway import get_gateway
from chat.models import (
    Artifact,
    Checkpoint,
    ContextEvent,
    Decision,
    EventType,
    Goal,
    GoalCheckpoint,
    Message,
    Session,
    Snapshot,
)
from engine.core.aging import Level
from engine.core.budget import Budget
from engine.core.config import ConfigError, ContextConfig, context_config_from_mapping
from engine.core.meter import Meter, build_meter
from engine.core.prompts import (
    ArtifactView,
    DecisionView,
    GoalCheckpointView,
    GoalView,
    render_pinned_block,
)
from engine.core.recall import Recall
from engine.core.reliability import CheckpointRetention, Reliability, compute_reliability, context_line
from engine.core.retention import facts_from_json
from engine.core.tokens import TokenCount
from engine.core.window import (
    ActiveMessage,
    CheckpointView,
    WindowBlock,
    assemble_window,
    prompt_messages,
    render_checkpoint,
    render_system,
)
from engine.llm import ChatMessage, Gateway, LLMError, Sampling
from engine.resources import count_text_tokens

logger = logging.getLogger(__name__)


def default_config() -> ContextConfig:
    """The global defaults: the spec's, with ``OLLM_CONTEXT_DEFAULTS`` over them."""
    return context_config_from_mapping(settings.OLLM_CONTEXT_DEFAULTS)


def session_config(session: Session) -> ContextConfig:
    """The session's settings over the global defaults; the defaults alone when the stored settings fail
    today's checks (stored before a check was tightened, or written past the services), so that no page or
    turn of the session fails on them. Saving its settings again says what is wrong."""
    try:
        return context_config_from_mapping(session.settings, base=default_config())
    except ConfigError:
        logger.warning("session %s: its stored settings fail their checks; the defaults apply", session.pk)
        return default_config()


def session_sampling(session: Session) -> Sampling:
    """How the session's replies are sampled: its settings over the global defaults; what neither
    sets is the model server's default."""
    return Sampling(**asdict(session_config(session).sampling))


# What is in the active context: checkpoints not merged away, messages not compressed.
ACTIVE_CHECKPOINT = Q(merged_into__isnull=True, retired=False)
ACTIVE_MESSAGE = Q(compressed_into__isnull=True, excluded_from_context=False)


def active_checkpoints(*, session: Session) -> QuerySet[Checkpoint]:
    """Checkpoints in the active context, oldest first."""
    return Checkpoint.objects.filter(ACTIVE_CHECKPOINT, session=session).order_by("number")


def active_messages(*, session: Session) -> QuerySet[Message]:
    """Messages in the active context, oldest first."""
    return Message.objects.filter(ACTIVE_MESSAGE, session=session).order_by("position")


def active_goal(*, session: Session) -> Goal | None:
    return (
        Goal.objects.filter(session=session, status=Goal.Status.ACTIVE)
        .prefetch_related("checkpoints")
        .order_by("-created_at")
        .first()
    )


def _goal_view(goal: Goal, decisions: Iterable[Decision]) -> GoalView:
    """The goal as the prompt builders see it; every decision of the session belongs to its block."""
    return GoalView(
        description=goal.description,
        priority=goal.priority,  # type: ignore[arg-type]
        status=goal.status,  # type: ignore[arg-type]
        checkpoints=tuple(GoalCheckpointView(cp.description, cp.status) for cp in goal.checkpoints.all()),  # type: ignore[arg-type]
        decisions=tuple(DecisionView(d.description, d.locked) for d in decisions),
        next_step=goal.next_step,
    )


def goal_view(*, goal: Goal) -> GoalView:
    return _goal_view(goal, Decision.objects.filter(session_id=goal.session_id).order_by("id"))


def pinned_blocks(*, session_ids: Sequence[UUID]) -> dict[UUID, str]:
    """What is never compressed besides the system prompt, per session: the active goal's block,
    the locked decisions and every artifact recorded in the session (by the panel, the API or a
    marker). Read in a fixed number of queries however many sessions (a list page)."""
    goals: dict[UUID, Goal] = {}
    for goal in (
        Goal.objects.filter(session_id__in=session_ids, status=Goal.Status.ACTIVE)
        .prefetch_related("checkpoints")
        .order_by("created_at")
    ):
        goals[goal.session_id] = goal  # the newest active goal
    decisions: dict[UUID, list[Decision]] = defaultdict(list)
    for decision in Decision.objects.filter(session_id__in=session_ids).order_by("id"):
        decisions[decision.session_id].append(decision)
    artifacts: dict[UUID, list[ArtifactView]] = defaultdict(list)
    for session_id, action, path in (
        Artifact.objects.filter(session_id__in=session_ids).order_by("id").values_list("session_id", "action", "path")
    ):
        artifacts[session_id].append(ArtifactView(action, path))  # type: ignore[arg-type]
    return {
        session_id: render_pinned_block(
            goal=_goal_view(goals[session_id], decisions[session_id]) if session_id in goals else None,
            locked_decisions=[d.description for d in decisions[session_id] if d.locked],
            artifacts=artifacts[session_id],
        )
        for session_id in session_ids
    }


def pinned_block(*, session: Session) -> str:
    """``pinned_blocks`` of one session."""
    return pinned_blocks(session_ids=[session.pk])[session.pk]


def locked_decisions(*, session: Session) -> list[str]:
    return list(
        Decision.objects.filter(session=session, locked=True).order_by("id").values_list("description", flat=True)
    )


def checkpoint_view(checkpoint: Checkpoint) -> CheckpointView:
    return CheckpointView(
        number=checkpoint.number,
        level=Level(checkpoint.level),
        range_label=checkpoint.range_label,
        summary=checkpoint.summary,
        key_decisions=tuple(checkpoint.key_decisions),
        files_modified=tuple(checkpoint.files_modified),
        next_steps=tuple(checkpoint.next_steps),
        ledger=tuple(fact.text for fact in facts_from_json(checkpoint.ledger)),
    )


def session_window(*, session: Session) -> tuple[WindowBlock, ...]:
    """The exact context the next call sends, block by block, with stored token counts."""
    pinned = pinned_block(session=session)
    checkpoints = active_checkpoints(session=session)
    messages = active_messages(session=session).only(
        "id", "role", "content", "tokens", "tool_call_id", "tool_name", "tool_args"
    )
    return assemble_window(
        system=render_system(session.system_prompt, pinned),
        system_tokens=session.system_prompt_tokens + (count_text_tokens(pinned) if pinned else 0),
        checkpoints=[(cp.id, render_checkpoint(checkpoint_view(cp)), cp.current_tokens) for cp in checkpoints],
        messages=[
            ActiveMessage(m.id, m.role, m.content, m.tokens, m.tool_call_id, m.tool_name, m.tool_args) for m in messages
        ],
    )


def sessions_budget(*, sessions: Sequence[Session]) -> dict[UUID, Budget]:
    """Each session's budget from stored counts, in a fixed number of queries however many
    sessions. The goal block is small and changes with every marker, so it is counted here rather
    than stored."""
    ids = [session.pk for session in sessions]
    blocks = pinned_blocks(session_ids=ids)

    def totals(rows: QuerySet[Any], field: str) -> dict[UUID, int]:
        return dict(
            rows.filter(session_id__in=ids)
            .values("session_id")
            .annotate(total=Sum(field))
            .values_list("session_id", "total")
        )

    checkpoint_tokens = totals(Checkpoint.objects.filter(ACTIVE_CHECKPOINT), "current_tokens")
    active_tokens = totals(Message.objects.filter(ACTIVE_MESSAGE), "tokens")
    return {
        session.pk: Budget(
            max_tokens=session.max_tokens,
            system_prompt_tokens=session.system_prompt_tokens
            + (count_text_tokens(blocks[session.pk]) if blocks[session.pk] else 0),
            checkpoint_tokens=checkpoint_tokens.get(session.pk) or 0,
            active_tokens=active_tokens.get(session.pk) or 0,
        )
        for session in sessions
    }


def session_budget(*, session: Session) -> Budget:
    """``sessions_budget`` of one session."""
    return sessions_budget(sessions=[session])[session.pk]


def sessions_reliability(*, sessions: Sequence[Session]) -> dict[UUID, Reliability]:
    """Each session's reliability, its active checkpoints read for all sessions at once."""
    checkpoints: dict[UUID, list[Checkpoint]] = defaultdict(list)
    for checkpoint in Checkpoint.objects.filter(
        ACTIVE_CHECKPOINT, session_id__in=[session.pk for session in sessions]
    ).order_by("number"):
        checkpoints[checkpoint.session_id].append(checkpoint)
    return {session.pk: _reliability(session, checkpoints[session.pk]) for session in sessions}


def session_reliability(*, session: Session) -> Reliability:
    """``sessions_reliability`` of one session."""
    return sessions_reliability(sessions=[session])[session.pk]


def _reliability(session: Session, checkpoints: Iterable[Checkpoint]) -> Reliability:
    return compute_reliability(
        parameter_size_b=session.model_parameter_size_b,
        compression_count=session.compression_count,
        checkpoints=[
            CheckpointRetention(tokens=cp.current_tokens, level=Level(cp.level), retention=cp.retention)
            for cp in checkpoints
        ],
    )


@dataclass(frozen=True)
class ContextReport:
    """The budget as a page or the API shows it."""

    budget: Budget
    system_tokens: int
    goal_tokens: int
    messages_exact: bool
    reliability: Reliability
    display: str
    compression_count: int


def session_context(*, session: Session) -> ContextReport:
    """The context as pages and the API show it."""
    return _context_report(
        session,
        budget=session_budget(session=session),
        reliability=session_reliability(session=session),
        messages_exact=context_counts_exact(session=session),
    )


def _context_report(
    session: Session, *, budget: Budget, reliability: Reliability, messages_exact: bool
) -> ContextReport:
    return ContextReport(
        budget=budget,
        system_tokens=session.system_prompt_tokens,
        # The pinned goal block is counted with the system prompt in the budget.
        goal_tokens=budget.system_prompt_tokens - session.system_prompt_tokens,
        messages_exact=messages_exact,
        reliability=reliability,
        display=context_line(
            used=budget.used,
            max_tokens=budget.max_tokens,
            reliability=reliability,
            compression_count=session.compression_count,
        ),
        compression_count=session.compression_count,
    )


def session_context_line(*, session: Session) -> str:
    """``Context: 5,234/13,600 🟡 65% (2 compressions)``."""
    return session_context(session=session).display


@dataclass(frozen=True)
class PromptBlock:
    kind: Literal["system", "goal", "checkpoint", "message", "recall", "draft"]
    role: str
    content: str
    tokens: int
    title: str = ""  # how the context window viewer names it


PINNED_TITLE = "Pinned: goal, locked decisions, artifacts"


@dataclass(frozen=True)
class Prompt:
    blocks: tuple[PromptBlock, ...]
    total_tokens: int
    exact: bool
    recall: Recall = field(default_factory=Recall)  # what a draft recalled (``session_prompt_for``)

    @property
    def budget_tokens(self) -> int:
        """The blocks' stored counts added up: what the budget, and so the meter, count as used.
        ``total_tokens`` (the model's reading of the message list) differs from it by what no block
        holds: the chat template's markers around the system message and the reply, the
        separators between the joined system blocks, and a tokenizer other than cl100k for the
        system prompt and the pinned block."""
        return sum(block.tokens for block in self.blocks)


def session_prompt(*, session: Session, gateway: Gateway | None = None) -> Prompt:
    """What the next call sends, block by block, with the system prompt and the pinned goal block apart.

    The system, goal and checkpoint blocks travel joined as one system message;
    ``total_tokens`` counts that message list as the model will (exactly on the
    embedded model, the calibrated estimate with its margin on Ollama).
    """
    window = session_window(session=session)
    pinned = pinned_block(session=session)
    head = [
        PromptBlock("system", "system", session.system_prompt.strip(), session.system_prompt_tokens, "System prompt")
    ]
    if pinned:
        head.append(PromptBlock("goal", "system", pinned, count_text_tokens(pinned), PINNED_TITLE))
    checkpoints = {cp.id: cp for cp in active_checkpoints(session=session)}
    positions = dict(active_messages(session=session).values_list("id", "position"))

    def title(block: WindowBlock) -> str:
        if block.kind == "checkpoint" and block.ref in checkpoints:
            cp = checkpoints[block.ref]
            return f"Checkpoint #{cp.number} · {cp.range_label} · {Level(cp.level).display}"
        return f"#{positions.get(block.ref or 0, '?')} {block.role}"

    blocks = (
        *head,
        *(PromptBlock(b.kind, b.role, b.content, b.tokens, title(b)) for b in window if b.kind != "system"),
    )
    try:
        count = (gateway or get_gateway()).count_prompt(
            [ChatMessage.of(m) for m in prompt_messages(window)], session.model
        )
    except LLMError:
        # No backend can count for this model now: the stored counts are the best estimate.
        count = TokenCount(sum(b.tokens for b in window), exact=False)
    return Prompt(blocks=blocks, total_tokens=count.tokens, exact=count.exact)


def session_last_event_id(*, session: Session) -> int:
    """The newest event's id (0 before the first): what came after it is new."""
    return ContextEvent.objects.filter(session=session).aggregate(last=Max("id"))["last"] or 0


def prompt_truncation_in_force(*, session: Session) -> ContextEvent | None:
    """The latest ``prompt-truncated`` event while the smaller context it set is still the
    session's (a change of model or size asks for the full context again)."""
    event = ContextEvent.objects.filter(session=session, type=EventType.PROMPT_TRUNCATED).order_by("-id").first()
    if event is None or event.payload.get("max_tokens") != session.max_tokens:
        return None
    return event


def context_meter(*, session: Session, budget: Budget | None = None) -> Meter:
    """The meter's segments in prompt order: system prompt, pinned goal, checkpoints, then the
    active user and assistant messages; ``budget`` when the caller has just read it."""
    budget = budget or session_budget(session=session)
    # order_by() drops the model's ordering, which would otherwise split the GROUP BY per message.
    by_role = dict(
        active_messages(session=session)
        .order_by()
        .values("role")
        .annotate(total=Sum("tokens"))
        .values_list("role", "total")
    )
    pinned = budget.system_prompt_tokens - session.system_prompt_tokens
    return build_meter(
        budget,
        [
            ("system", "system prompt", session.system_prompt_tokens),
            ("goal", "pinned goal, decisions and artifacts", pinned),
            ("checkpoints", "checkpoints", budget.checkpoint_tokens),
            ("user", "your messages", by_role.get(Message.Role.USER, 0)),
            (
                "assistant",
                "assistant messages",
                by_role.get(Message.Role.ASSISTANT, 0) + by_role.get(Message.Role.TOOL, 0),
            ),
        ],
    )


def context_counts_exact(*, session: Session) -> bool:
    """Whether every active message was counted by the model's own tokenizer."""
    return not active_messages(session=session).filter(tokens_exact=False).exists()


def reliability_history(*, session: Session) -> list[tuple[datetime, float]]:
    """The reliability score after each compression or rollover, from their events."""
    points = []
    for created_at, payload in (
        session_events(session=session)
        .filter(type__in=[EventType.COMPRESSED, EventType.ROLLOVER_COMPLETE])
        .values_list("created_at", "payload")
    ):
        if isinstance(payload, dict) and isinstance(payload.get("reliability"), int | float):
            points.append((created_at, float(payload["reliability"])))
    return points


# Who owns what: every object below belongs to the owner of its session. Another user's
# answers Http404, as one that does not exist.


def owned_goal(*, user: Any, goal_id: int) -> Goal:
    return get_object_or_404(Goal.objects.select_related("session"), pk=goal_id, session__owner=user)


def owned_goal_checkpoint(*, user: Any, checkpoint_id: int) -> GoalCheckpoint:
    return get_object_or_404(
        GoalCheckpoint.objects.select_related("goal__session"), pk=checkpoint_id, goal__session__owner=user
    )


def owned_decision(*, user: Any, decision_id: int) -> Decision:
    return get_object_or_404(Decision.objects.select_related("session"), pk=decision_id, session__owner=user)


def owned_snapshot(*, user: Any, snapshot_id: int) -> Snapshot:
    return get_object_or_404(Snapshot.objects.select_related("session"), pk=snapshot_id, session__owner=user)


def decisions_of_session(*, session: Session) -> QuerySet[Decision]:
    """Locked decisions first: they are the ones pinned in every prompt."""
    return Decision.objects.filter(session=session).order_by("-locked", "id")


def artifacts_of_session(*, session: Session) -> QuerySet[Artifact]:
    return Artifact.objects.filter(session=session).order_by("-id")


def session_checkpoints(*, session: Session) -> QuerySet[Checkpoint]:
    """Every checkpoint of the session, merged and retired ones too, oldest first, with their revisions."""
    return Checkpoint.objects.filter(session=session).prefetch_related("revisions").order_by("number", "id")


def session_goals(*, session: Session) -> QuerySet[Goal]:
    return (
        Goal.objects.filter(session=session)
        .prefetch_related("checkpoints", "decisions", "artifacts")
        .order_by("created_at", "id")
    )


def session_snapshots(*, session: Session) -> QuerySet[Snapshot]:
    """Newest first."""
    return Snapshot.objects.filter(session=session).order_by("-created_at", "-id")


def session_events(*, session: Session, after: int = 0) -> QuerySet[ContextEvent]:
    """The events after event ``after``, in the order they happened."""
    return ContextEvent.objects.filter(session=session, id__gt=after).order_by("id")
