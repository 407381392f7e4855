"""The API's shapes for the context manager: budget, prompt, checkpoints, goals, snapshots, events."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict

from chat.models import Checkpoint, CheckpointRevision, Goal, Session
from chat.selectors.context import ContextReport, session_context
from chat.selectors.prompt import Prompt

# Ids are 64-bit database keys: a larger number in a path could only fail inside the database.
MAX_ID = 2**63 - 1
ObjectId = Annotated[int, Field(ge=1, le=MAX_ID)]
EventCursor = Annotated[int, Field(ge=0, le=MAX_ID)]


class StrictIn(Schema):
    """A request body's shape, read strictly (issue 49, item 6): no boolean for a number (``{"position":
    true}`` branched at position 1), no number for a text, no text for a boolean (``locked: "yes"``);
    422 naming the field."""

    model_config = ConfigDict(strict=True)


class ReliabilityOut(Schema):
    score: float = Field(description="0 to 1.")
    percent: int
    level: str = Field(description="High, Medium, Low or Critical.")


class ContextOut(Schema):
    max_tokens: int
    system_tokens: int
    goal_tokens: int
    checkpoint_tokens: int
    message_tokens: int
    available: int
    trigger_at: int
    usage_pct: float = Field(description="Tokens in use as a share of max_tokens, in percent.")
    exact: bool = Field(description="Whether every active message was counted by the model's own tokenizer.")
    compression_count: int
    reliability: ReliabilityOut
    display: str = Field(description="The context line, e.g. 'Context: 5,234/13,600 🟡 65% (2 compressions)'.")

    @classmethod
    def of(cls, session: Session) -> ContextOut:
        """The session's context as stored now."""
        return cls.of_report(session_context(session=session))

    @classmethod
    def of_report(cls, report: ContextReport) -> ContextOut:
        """A context as read before (by a turn, say)."""
        budget = report.budget
        return cls(
            max_tokens=budget.max_tokens,
            system_tokens=report.system_tokens,
            goal_tokens=report.goal_tokens,
            checkpoint_tokens=budget.checkpoint_tokens,
            message_tokens=budget.active_tokens,
            available=budget.available,
            trigger_at=budget.trigger_at,
            usage_pct=round(100 * budget.used / budget.max_tokens, 1) if budget.max_tokens else 100.0,
            exact=report.messages_exact,
            compression_count=report.compression_count,
            reliability=ReliabilityOut(
                score=round(report.reliability.score, 4),
                percent=report.reliability.percent,
                level=report.reliability.level.label,
            ),
            display=report.display,
        )


class PromptMessageOut(Schema):
    role: str
    content: str
    tokens: int
    kind: Literal["system", "goal", "checkpoint", "message", "recall", "draft"] = Field(
        description="recall: what the history brings back for a draft, sent at the start of the draft's "
        "message; draft: the draft itself (only with ?draft=)"
    )


class RecalledOut(Schema):
    position: int = Field(description="The recalled message's position in the full history.")
    role: str
    said_on: date | None
    score: float = Field(description="Its BM25 score against the draft.")
    words: list[str] = Field(description="The draft's words it shares: why it was recalled.")


class PromptOut(Schema):
    messages: list[PromptMessageOut]
    total_tokens: int
    exact: bool
    room_tokens: int = Field(description="The most the prompt may take and leave the reply its reserve.")
    fits: bool = Field(
        description="false: the prompt is over room_tokens, so the turn compresses (or rolls over) before it "
        "asks the model, which then sees less than this"
    )
    recalled: list[RecalledOut] = Field(default_factory=list)

    @classmethod
    def of(cls, prompt: Prompt) -> PromptOut:
        return cls(
            messages=[
                PromptMessageOut(role=b.role, content=b.content, tokens=b.tokens, kind=b.kind) for b in prompt.blocks
            ],
            total_tokens=prompt.total_tokens,
            exact=prompt.exact,
            room_tokens=prompt.room_tokens,
            fits=prompt.fits,
            recalled=[
                RecalledOut(
                    position=item.candidate.position,
                    role=item.candidate.role,
                    said_on=item.candidate.said_on,
                    score=round(item.score, 3),
                    words=list(item.words),
                )
                for item in prompt.recall.items
            ],
        )


class CompressScheduled(Schema):
    status: Literal["scheduled"] = "scheduled"
    event_id: int = Field(
        description="The newest event before the compression: its events (compressed, rollover-complete, "
        "compression-skipped or compression-error) follow this id in /events?after=event_id."
    )


class CompressResult(Schema):
    status: Literal["compressed", "rolled-over", "skipped", "error"]
    reason: str
    checkpoint_id: int | None
    context: ContextOut


class RevisionOut(Schema):
    level: int
    tokens: int
    summary: str
    reason: str
    created_at: datetime
    retention: float | None = Field(
        description="Share of the key facts of the messages the checkpoint stands for that the next prompt held "
        "with this version (in any checkpoint, the pinned block or the active messages)."
    )
    facts_total: int
    facts_kept: int
    missing_facts: list[list[str]] = Field(description="The facts the next prompt lost, as [kind, text].")
    ledger_dropped: list[list[str]] = Field(
        description="Facts the ledger had no room for at this version, as [kind, text]; the full history keeps them."
    )


class CheckpointOut(Schema):
    id: int
    level: int
    level_label: str
    range: str
    current_tokens: int
    original_tokens: int
    compression_number: int
    key_decisions: list[str]
    files_modified: list[str]
    next_steps: list[str]
    summary: str
    strategy: str
    retention: float | None = Field(
        description="Share of its messages' key facts the prompt held at its latest version, measured on the prompt."
    )
    facts_total: int
    ledger: list[list[str]] = Field(description="Facts kept verbatim in the prompt beside the summary, [kind, text].")
    active: bool = Field(description="In the active context (not merged into another, nor retired by a restore).")
    revisions: list[RevisionOut]

    @staticmethod
    def resolve_range(obj: Checkpoint) -> str:
        return obj.range_label

    @staticmethod
    def resolve_compression_number(obj: Checkpoint) -> int:
        return obj.number

    @staticmethod
    def resolve_facts_total(obj: Checkpoint) -> int:
        return len(obj.facts) if isinstance(obj.facts, list) else 0

    @staticmethod
    def resolve_active(obj: Checkpoint) -> bool:
        return obj.is_active

    @staticmethod
    def resolve_revisions(obj: Checkpoint) -> list[CheckpointRevision]:
        return list(obj.revisions.all())


GoalPriority = Literal["high", "medium", "low"]
GoalStatus = Literal["active", "paused", "completed"]
GoalCheckpointStatus = Literal["pending", "in-progress", "completed"]
ArtifactAction = Literal["created", "modified", "attached"]


class GoalIn(StrictIn):
    description: str
    priority: GoalPriority = "medium"


class GoalPatch(StrictIn):
    description: str | None = None
    priority: GoalPriority | None = None
    status: GoalStatus | None = None


class GoalCheckpointIn(StrictIn):
    description: str
    status: GoalCheckpointStatus = "pending"


class GoalCheckpointPatch(StrictIn):
    description: str | None = None
    status: GoalCheckpointStatus | None = None


class GoalCheckpointOut(Schema):
    id: int
    goal_id: int
    description: str
    status: str


class DecisionIn(StrictIn):
    description: str
    locked: bool = False


class DecisionPatch(StrictIn):
    description: str | None = None
    locked: bool | None = None


class DecisionOut(Schema):
    id: int
    goal_id: int | None
    description: str
    locked: bool
    created_at: datetime
    updated_at: datetime


class ArtifactIn(StrictIn):
    path: str
    action: ArtifactAction


class ArtifactOut(Schema):
    id: int
    goal_id: int | None
    path: str
    action: str
    created_at: datetime


class GoalOut(Schema):
    id: int
    description: str
    priority: str
    status: str
    next_step: str
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    checkpoints: list[GoalCheckpointOut]
    decisions: list[DecisionOut]
    artifacts: list[ArtifactOut]

    @staticmethod
    def resolve_checkpoints(obj: Goal) -> list[Any]:
        return list(obj.checkpoints.all())

    @staticmethod
    def resolve_decisions(obj: Goal) -> list[Any]:
        return list(obj.decisions.all())

    @staticmethod
    def resolve_artifacts(obj: Goal) -> list[Any]:
        return list(obj.artifacts.all())


class SnapshotIn(StrictIn):
    reason: str = Field("", max_length=200)


class SnapshotOut(Schema):
    id: int
    kind: str
    reason: str
    token_count: int
    message_count: int
    checkpoint_count: int
    model: str
    tier: int
    created_at: datetime


class RestoreOut(Schema):
    restored: SnapshotOut
    undo_snapshot: SnapshotOut | None = Field(
        description="Taken just before the restore: restore it to undo. None when the session's "
        "snapshots are off: that restore cannot be undone."
    )
    context: ContextOut


class EventOut(Schema):
    id: int
    type: str
    payload: dict[str, Any]
    created_at: datetime
