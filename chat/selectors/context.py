"""Reads of the context manager: budgets, reliability and the state a snapshot holds."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import Count, Max, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.shortcuts import get_object_or_404

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
from engine.core.reliability import CheckpointRetention, Reliability, compute_reliability, context_line
from engine.core.retention import facts_from_json
from engine.core.window import (
    ActiveMessage,
    CheckpointView,
    WindowBlock,
    assemble_window,
    render_checkpoint,
    render_system,
    window_budget,
)
from engine.llm import Sampling
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


def goal_view(*, goal: Goal) -> GoalView:
    """The goal as the prompt builders see it; every decision of the session belongs to its block."""
    return GoalView(
        description=goal.description,
        priority=goal.priority,  # type: ignore[arg-type]
        status=goal.status,  # type: ignore[arg-type]
        checkpoints=tuple(GoalCheckpointView(cp.description, cp.status) for cp in goal.checkpoints.all()),  # type: ignore[arg-type]
        decisions=tuple(
            DecisionView(d.description, d.locked)
            for d in Decision.objects.filter(session_id=goal.session_id).order_by("id")
        ),
        next_step=goal.next_step,
    )


_GOAL, _DECISION, _ARTIFACT = 0, 1, 2  # the kinds of row the pinned block is read from, in one query


def pinned_blocks(*, session_ids: Sequence[UUID]) -> dict[UUID, str]:
    """What is never compressed besides the system prompt, per session: the active goal's block,
    the locked decisions and every artifact recorded in the session (by the panel, the API or a
    marker). Read in one query however many sessions (a list page), and one more for the steps of
    the active goals when there are any."""
    rows = (
        Goal.objects.filter(session_id__in=session_ids, status=Goal.Status.ACTIVE)
        .order_by()
        .values_list("session_id", Value(_GOAL), "id", "description", "next_step", "priority", Value(False))
        .union(
            Decision.objects.filter(session_id__in=session_ids)
            .order_by()
            .values_list("session_id", Value(_DECISION), "id", "description", Value(""), Value(""), "locked"),
            Artifact.objects.filter(session_id__in=session_ids)
            .order_by()
            .values_list("session_id", Value(_ARTIFACT), "id", "path", "action", Value(""), Value(False)),
            all=True,
        )
    )
    # Per session and kind, oldest first: the newest active goal is the session's.
    found: dict[tuple[UUID, int], list[tuple[Any, ...]]] = defaultdict(list)
    for session_id, kind, pk, text, detail, priority, locked in sorted(rows, key=lambda row: (row[1], row[2])):
        found[session_id, kind].append((pk, text, detail, priority, locked))
    goals = {session_id: found[session_id, _GOAL][-1] for session_id in session_ids if found[session_id, _GOAL]}
    steps: dict[int, list[GoalCheckpointView]] = defaultdict(list)
    if goals:
        for goal_id, description, status in (
            GoalCheckpoint.objects.filter(goal_id__in=[goal[0] for goal in goals.values()])
            .order_by("id")
            .values_list("goal_id", "description", "status")
        ):
            steps[goal_id].append(GoalCheckpointView(description, status))  # type: ignore[arg-type]
    blocks = {}
    for session_id in session_ids:
        decisions = [DecisionView(text, locked) for _, text, _, _, locked in found[session_id, _DECISION]]
        goal = goals.get(session_id)
        blocks[session_id] = render_pinned_block(
            goal=GoalView(
                description=goal[1],
                priority=goal[3],
                status=Goal.Status.ACTIVE,  # type: ignore[arg-type]
                checkpoints=tuple(steps[goal[0]]),
                decisions=tuple(decisions),
                next_step=goal[2],
            )
            if goal is not None
            else None,
            locked_decisions=[decision.description for decision in decisions if decision.locked],
            artifacts=[ArtifactView(action, path) for _, path, action, _, _ in found[session_id, _ARTIFACT]],
        )
    return blocks


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
    return session_context_read(session=session).window


@dataclass(frozen=True)
class ContextRead:
    """The window the next call sends and the report of the same rows, read together. A turn asks its
    reply from the window; when nothing but its own messages was written to the context since, the
    report with them added (``context_report_with``) is the context after it, with no second reading."""

    window: tuple[WindowBlock, ...]
    report: ContextReport


def session_context_read(*, session: Session) -> ContextRead:
    """``session_window`` and ``session_context`` from one reading of the pinned block, the active
    checkpoints and the active messages."""
    pinned = pinned_block(session=session)
    checkpoints = list(active_checkpoints(session=session))
    messages = list(
        active_messages(session=session).only(
            "id", "role", "content", "tokens", "tokens_exact", "tool_call_id", "tool_name", "tool_args"
        )
    )
    window = assemble_window(
        system=render_system(session.system_prompt, pinned),
        system_tokens=session.system_prompt_tokens + (count_text_tokens(pinned) if pinned else 0),
        checkpoints=[(cp.id, render_checkpoint(checkpoint_view(cp)), cp.current_tokens) for cp in checkpoints],
        messages=[
            ActiveMessage(m.id, m.role, m.content, m.tokens, m.tool_call_id, m.tool_name, m.tool_args) for m in messages
        ],
    )
    report = _context_report(
        session,
        budget=window_budget(window, max_tokens=session.max_tokens),
        reliability=_reliability(session, checkpoints),
        messages_exact=all(m.tokens_exact for m in messages),
        role_tokens=_role_tokens(messages),
    )
    return ContextRead(window, report)


def context_report_with(report: ContextReport, *, session: Session, added: Sequence[Message]) -> ContextReport:
    """``report`` with the messages ``added`` to the context since it was read; ``session`` as the
    last of them wrote it. Precondition: nothing else was written to the context meanwhile (the
    session's context version moved by one for each added message, and by nothing else)."""
    budget = replace(
        report.budget,
        max_tokens=session.max_tokens,
        active_tokens=report.budget.active_tokens + sum(m.tokens for m in added),
    )
    return _context_report(
        session,
        budget=budget,
        reliability=report.reliability,
        messages_exact=report.messages_exact and all(m.tokens_exact for m in added),
        role_tokens=_role_tokens(added, report.role_tokens),
    )


def _role_tokens(messages: Iterable[Message], base: dict[str, int] | None = None) -> dict[str, int]:
    """``base`` with the messages' tokens added, by role."""
    tokens = dict(base or {})
    for message in messages:
        tokens[message.role] = tokens.get(message.role, 0) + message.tokens
    return tokens


def sessions_context(*, sessions: Sequence[Session]) -> dict[UUID, ContextReport]:
    """Each session's context as pages and the API show it, from stored counts, in a fixed number of
    queries however many sessions (a list page): the pinned block, the active checkpoints, and the
    active messages' tokens by role. The goal block is small and changes with every marker, so it is
    counted here rather than stored."""
    ids = [session.pk for session in sessions]
    blocks = pinned_blocks(session_ids=ids)
    checkpoints: dict[UUID, list[Checkpoint]] = defaultdict(list)
    for checkpoint in (
        Checkpoint.objects.filter(ACTIVE_CHECKPOINT, session_id__in=ids)
        .only("session_id", "current_tokens", "level", "retention")
        .order_by("number")
    ):
        checkpoints[checkpoint.session_id].append(checkpoint)
    role_tokens: dict[UUID, dict[str, int]] = defaultdict(dict)
    estimated: set[UUID] = set()
    # order_by() drops the model's ordering, which would otherwise split the GROUP BY per message.
    for session_id, role, total, inexact in (
        Message.objects.filter(ACTIVE_MESSAGE, session_id__in=ids)
        .order_by()
        .values("session_id", "role")
        .annotate(total=Sum("tokens"), inexact=Count("id", filter=Q(tokens_exact=False)))
        .values_list("session_id", "role", "total", "inexact")
    ):
        role_tokens[session_id][role] = total or 0
        if inexact:
            estimated.add(session_id)
    reports = {}
    for session in sessions:
        pinned = blocks[session.pk]
        cps = checkpoints[session.pk]
        budget = Budget(
            max_tokens=session.max_tokens,
            system_prompt_tokens=session.system_prompt_tokens + (count_text_tokens(pinned) if pinned else 0),
            checkpoint_tokens=sum(cp.current_tokens for cp in cps),
            active_tokens=sum(role_tokens[session.pk].values()),
        )
        reports[session.pk] = _context_report(
            session,
            budget=budget,
            reliability=_reliability(session, cps),
            messages_exact=session.pk not in estimated,
            role_tokens=role_tokens[session.pk],
        )
    return reports


def session_context(*, session: Session) -> ContextReport:
    """``sessions_context`` of one session."""
    return sessions_context(sessions=[session])[session.pk]


def sessions_budget(*, sessions: Sequence[Session]) -> dict[UUID, Budget]:
    """Each session's budget (``sessions_context``)."""
    return {session_id: report.budget for session_id, report in sessions_context(sessions=sessions).items()}


def session_budget(*, session: Session) -> Budget:
    """``sessions_budget`` of one session."""
    return session_context(session=session).budget


def session_reliability(*, session: Session) -> Reliability:
    """The session's reliability (``sessions_context``)."""
    return session_context(session=session).reliability


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
    # The active messages' tokens by role, which the meter shows apart.
    role_tokens: dict[str, int]


def _context_report(
    session: Session,
    *,
    budget: Budget,
    reliability: Reliability,
    messages_exact: bool,
    role_tokens: dict[str, int],
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
        role_tokens=role_tokens,
    )


def session_context_line(*, session: Session) -> str:
    """``Context: 5,234/13,600 🟡 65% (2 compressions)``."""
    return session_context(session=session).display


def session_last_event_id(*, session: Session) -> int:
    """The newest event's id (0 before the first): what came after it is new."""
    return ContextEvent.objects.filter(session=session).aggregate(last=Max("id"))["last"] or 0


def session_and_last_event_id(*, session_id: UUID) -> tuple[Session, int]:
    """The session and its newest event's id (``session_last_event_id``), in one query."""
    newest = ContextEvent.objects.filter(session=OuterRef("pk")).order_by("-id").values("id")[:1]
    session = Session.objects.annotate(last_event_id=Subquery(newest)).get(pk=session_id)
    return session, session.last_event_id or 0


def prompt_truncation_in_force(*, session: Session) -> ContextEvent | None:
    """The latest ``prompt-truncated`` event while the smaller context it set is still the
    session's (a change of model or size asks for the full context again)."""
    event = ContextEvent.objects.filter(session=session, type=EventType.PROMPT_TRUNCATED).order_by("-id").first()
    if event is None or event.payload.get("max_tokens") != session.max_tokens:
        return None
    return event


def context_meter(*, session: Session, report: ContextReport | None = None) -> Meter:
    """The meter's segments in prompt order: system prompt, pinned goal, checkpoints, then the
    active user and assistant messages; ``report`` when the caller has just read it."""
    report = report or session_context(session=session)
    roles = report.role_tokens
    return build_meter(
        report.budget,
        [
            ("system", "system prompt", session.system_prompt_tokens),
            ("goal", "pinned goal, decisions and artifacts", report.goal_tokens),
            ("checkpoints", "checkpoints", report.budget.checkpoint_tokens),
            ("user", "your messages", roles.get(Message.Role.USER, 0)),
            (
                "assistant",
                "assistant messages",
                roles.get(Message.Role.ASSISTANT, 0) + roles.get(Message.Role.TOOL, 0),
            ),
        ],
    )


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
