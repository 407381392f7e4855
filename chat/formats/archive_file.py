"""The archive of a session: the one model of it, for the archive export, its import and the OpenAPI document.

The OLLM session file (``chat.formats.session_file``) holds the full history; the archive holds that file, unchanged,
under ``session``, and beside it everything else a session has: its own fields and settings, each message's
context state, the checkpoints with every revision, facts and ledger, the goals with their checkpoints, the
decisions, the artifacts, the snapshots with their state, and the context events::

    {"format": "ollm-site-archive", "version": 1, "session": {...the session file...},
     "state": {...}, "messages": [...], "checkpoints": [...], "goals": [...], "decisions": [...],
     "artifacts": [...], "snapshots": [...], "events": [...]}

An archive names nothing by a database id. A message is named by its ``position``; a checkpoint, goal,
decision, artifact and snapshot by its ``id`` in the archive (1, 2, … in the order they were created), and
every reference (a message's ``compressed_into``, a checkpoint's ``merged_into``, the ids inside a snapshot's
state and an event's payload) uses those. So the archive of an imported session is the archive it was imported
from, byte for byte (apart from the sessionId when the importing user already holds a session of it: then the
copy has its own, see ``chat.services.files.archive``).

The archive comes from outside when it is imported: it is checked completely (types, lengths, storable text,
bounded free JSON, at most ``MAX_IMPORT_ENTRIES`` entries in each list) before anything is written.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from chat.formats.file_checks import (
    MAX_STORED_INT,
    TOO_MANY_ENTRIES,
    BigCount,
    Compressions,
    ContextTokens,
    Count,
    MessageTokens,
    ParameterSize,
    Ref,
    Share,
    SmallCount,
    free_json,
    iso_time,
    storable,
)
from chat.formats.session_file import (
    MAX_IMPORT_ENTRIES,
    ModelName,
    Name,
    SessionFile,
    SystemPrompt,
    Title,
)
from chat.models import MAX_GOAL_CHARS, MAX_MESSAGE_CHARS, MAX_PATH_CHARS, MAX_SOURCE_FIELD_LENGTH, EventType
from engine.core.aging import Level

ARCHIVE_FORMAT: Final = "ollm-site-archive"
ARCHIVE_VERSION: Final = 1


def _time_text(moment: datetime) -> str:
    """UTC with a Z, to the microsecond: the archive keeps every time exactly as the database holds it (the
    session file's times are the CLI's)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


Time = Annotated[
    datetime,
    BeforeValidator(iso_time),
    PlainSerializer(_time_text, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


def _level(value: int) -> int:
    if value not in {level.value for level in Level}:
        raise PydanticCustomError("level", "must be one of 0, 1, 2, 3")
    return value


Text = Annotated[str, Field(max_length=MAX_MESSAGE_CHARS), AfterValidator(storable)]
ShortText = Annotated[str, Field(max_length=MAX_GOAL_CHARS), AfterValidator(storable)]
Path = Annotated[str, Field(max_length=MAX_PATH_CHARS), AfterValidator(storable)]
Label = Annotated[str, Field(max_length=250), AfterValidator(storable)]
LevelValue = Annotated[int, AfterValidator(_level)]
# A key fact, as the checkpoints store it: [kind, text].
Fact = Annotated[list[Text], Field(min_length=2, max_length=2)]


def _entries() -> Any:
    """A list of at most MAX_IMPORT_ENTRIES items, empty when missing."""
    return Field(default_factory=list, max_length=MAX_IMPORT_ENTRIES)


Strategy = Literal["summarize", "truncate"]


class _ArchiveModel(BaseModel):
    # snake_case, as the rest of ollm-site's API; strict: no "3" for 3; no field it does not know; no NaN.
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class ArchiveState(_ArchiveModel):
    """The session's fields the session file does not hold (its title, model, context size and system prompt
    are the file's); its times again, to the microsecond."""

    summary_model: ModelName = ""
    model_parameter_size_b: ParameterSize | None = None
    max_tokens: ContextTokens
    system_prompt_tokens: Count
    settings: Annotated[dict[str, Any], free_json(2, precise=False)] = Field(default_factory=dict)
    compression_count: Compressions
    context_version: BigCount
    compressed_through: Count
    reliability_score: Share
    created_at: Time
    last_activity: Time
    # The outside client that started it (the drop-in endpoints); the copy is marked the same, but no
    # request of that client continues the copy (its history's digest stays with the original).
    client: Annotated[str, Field(max_length=MAX_SOURCE_FIELD_LENGTH)] = ""


class ArchiveMessage(_ArchiveModel):
    """One message's context state, in the order of the history (the file's messages and tool calls put back
    in one list by ``role``: a ``tool`` entry is the file's next tool call, any other its next message), with
    its time to the microsecond."""

    position: Ref
    role: Literal["user", "assistant", "system", "tool"]
    tokens: MessageTokens
    tokens_exact: bool
    done_reason: Annotated[str, Field(max_length=16)] = ""
    context_version: BigCount
    compressed_into: Ref | None = None
    excluded_from_context: bool = False
    # The position of the first version of the message this one is another version of (Message.version_of);
    # written only when there is one, so an archive from before versions exports as it was imported.
    version_of: Ref | None = None
    # The text file attached to the user message (Message.attachment_name), whose chip the page shows; written
    # only when there is one, so an archive from before attachments exports as it was imported.
    attachment_name: Annotated[str, Field(max_length=255)] = ""
    created_at: Time


class ArchiveRevision(_ArchiveModel):
    level: LevelValue
    tokens: Count
    summary: Text
    reason: Literal["created", "aged", "merged", "restored"]
    retention: Share | None = None
    facts_total: Count = 0
    facts_kept: Count = 0
    missing_facts: list[Fact] = _entries()
    ledger_dropped: list[Fact] = _entries()
    created_at: Time


class ArchiveCheckpoint(_ArchiveModel):
    id: Ref
    number: Count
    level: LevelValue
    first_position: Count | None = None
    last_position: Count | None = None
    origin: Label = ""
    summary: Text
    strategy: Strategy
    original_tokens: Count
    current_tokens: Count
    compression_count: Compressions
    key_decisions: list[Text] = _entries()
    files_modified: list[Text] = _entries()
    next_steps: list[Text] = _entries()
    retention: Share | None = None
    facts: list[Fact] = _entries()
    ledger: list[Fact] = _entries()
    merged_into: Ref | None = None
    retired: bool = False
    created_at: Time
    compressed_at: Time | None = None
    revisions: list[ArchiveRevision] = _entries()


class ArchiveGoalCheckpoint(_ArchiveModel):
    description: ShortText
    status: Literal["pending", "in-progress", "completed"]
    created_at: Time
    updated_at: Time


class ArchiveGoal(_ArchiveModel):
    id: Ref
    description: ShortText
    priority: Literal["high", "medium", "low"]
    status: Literal["active", "paused", "completed"]
    next_step: ShortText = ""
    created_at: Time
    updated_at: Time
    completed_at: Time | None = None
    checkpoints: list[ArchiveGoalCheckpoint] = _entries()


class ArchiveDecision(_ArchiveModel):
    id: Ref
    goal: Ref | None = None
    description: ShortText
    locked: bool
    created_at: Time
    updated_at: Time


class ArchiveArtifact(_ArchiveModel):
    id: Ref
    goal: Ref | None = None
    path: Path
    action: Literal["created", "modified", "attached"]
    created_at: Time


# A snapshot's state, as chat.selectors.snapshot_state.session_state writes it, its ids the archive's.


class StateSession(_ArchiveModel):
    id: Name | None = Field(default=None, description="The session's id (on import: the new session's).")
    title: Title | None = None
    model: ModelName | None = None
    context_size: ContextTokens
    max_tokens: ContextTokens
    system_prompt: SystemPrompt
    system_prompt_tokens: Count
    settings: Annotated[dict[str, Any], free_json(5, precise=False)] = Field(default_factory=dict)
    compression_count: Compressions


def _message_state(value: list[Any]) -> list[Any]:
    """``[position, compressed_into, excluded_from_context]``."""
    ok = (
        len(value) == 3
        and type(value[0]) is int
        and 0 < value[0] <= MAX_STORED_INT
        and (value[1] is None or (type(value[1]) is int and 0 < value[1] <= MAX_STORED_INT))
        and type(value[2]) is bool
    )
    if not ok:
        raise PydanticCustomError(
            "message_state", "must be [position, checkpoint or null, excluded_from_context (true or false)]"
        )
    return value


class StateMessages(_ArchiveModel):
    last_position: Count
    states: list[Annotated[list[Any], AfterValidator(_message_state)]] = Field(
        max_length=MAX_IMPORT_ENTRIES, description="[position, compressed_into, excluded_from_context]"
    )


class StateCheckpoint(_ArchiveModel):
    id: Ref
    number: Count
    level: LevelValue
    # Snapshots taken before ranges were integers hold only a range_label, and before the ledger no facts.
    first_position: Count | None = None
    last_position: Count | None = None
    origin: Label = ""
    range_label: Label | None = None
    summary: Text
    strategy: Strategy
    original_tokens: Count
    current_tokens: Count
    compression_count: Compressions
    key_decisions: list[Text] = _entries()
    files_modified: list[Text] = _entries()
    next_steps: list[Text] = _entries()
    facts: list[Fact] = _entries()
    ledger: list[Fact] = _entries()
    retention: Share | None = None
    merged_into: Ref | None = None
    retired: bool = False


class StateGoalCheckpoint(_ArchiveModel):
    description: ShortText
    status: Literal["pending", "in-progress", "completed"]


class StateGoal(_ArchiveModel):
    id: Ref
    description: ShortText
    priority: Literal["high", "medium", "low"]
    status: Literal["active", "paused", "completed"]
    next_step: ShortText = ""
    created_at: Annotated[str, Field(max_length=64)] | None = None
    completed_at: Annotated[str, Field(max_length=64)] | None = None
    checkpoints: list[StateGoalCheckpoint] = _entries()


class StateDecision(_ArchiveModel):
    id: Ref
    goal: Ref | None = None
    description: ShortText
    locked: bool


class StateArtifact(_ArchiveModel):
    id: Ref
    goal: Ref | None = None
    path: Path
    action: Literal["created", "modified", "attached"]


class SnapshotState(_ArchiveModel):
    session: StateSession
    messages: StateMessages
    checkpoints: list[StateCheckpoint] = _entries()
    goals: list[StateGoal] = _entries()
    decisions: list[StateDecision] = _entries()
    artifacts: list[StateArtifact] = _entries()


class ArchiveSnapshot(_ArchiveModel):
    id: Ref
    kind: Literal["auto", "manual"]
    reason: Annotated[str, Field(max_length=200), AfterValidator(storable)] = ""
    state: SnapshotState
    token_count: Count
    message_count: Count
    checkpoint_count: Count
    model: ModelName
    tier: SmallCount
    created_at: Time


def _event_type(value: str) -> str:
    """One of the event types this installation records (``chat.models.EventType``)."""
    if value not in EventType.values:
        raise PydanticCustomError("event_type", "must be one of {types}", {"types": ", ".join(EventType.values)})
    return value


EventKind = Annotated[str, AfterValidator(_event_type)]
# The payload keys that name a checkpoint (or a list of them) and a snapshot.
CHECKPOINT_KEYS = ("checkpoint",)
CHECKPOINT_LIST_KEYS = ("merged",)
SNAPSHOT_KEYS = ("snapshot", "undo_snapshot")


class ArchiveEvent(_ArchiveModel):
    type: EventKind
    payload: Annotated[dict[str, Any], free_json(3, precise=False)] = Field(
        default_factory=dict,
        description="As stored; checkpoint (merged) and snapshot (undo_snapshot) are the archive's ids, "
        "null for a snapshot that was deleted.",
    )
    created_at: Time


class SessionArchive(_ArchiveModel):
    """A whole session: the OLLM session file under ``session`` and everything else beside it."""

    format: Literal["ollm-site-archive"]
    version: Literal[1]
    session: SessionFile
    state: ArchiveState
    messages: list[ArchiveMessage] = Field(max_length=MAX_IMPORT_ENTRIES)
    checkpoints: list[ArchiveCheckpoint] = _entries()
    goals: list[ArchiveGoal] = _entries()
    decisions: list[ArchiveDecision] = _entries()
    artifacts: list[ArchiveArtifact] = _entries()
    snapshots: list[ArchiveSnapshot] = _entries()
    events: list[ArchiveEvent] = _entries()

    @model_validator(mode="before")
    @classmethod
    def _not_too_many_entries(cls, data: Any) -> Any:
        """Counted before anything else is checked, so a huge archive is refused as too large (413)."""
        if isinstance(data, dict):
            for key in ("messages", "checkpoints", "goals", "decisions", "artifacts", "snapshots", "events"):
                value = data.get(key)
                if isinstance(value, list) and len(value) > MAX_IMPORT_ENTRIES:
                    raise PydanticCustomError(
                        TOO_MANY_ENTRIES,
                        "The archive holds {count} {key}; the limit is {limit}.",
                        {"count": f"{len(value):,}", "key": key, "limit": f"{MAX_IMPORT_ENTRIES:,}"},
                    )
        return data

    def to_json(self) -> dict[str, Any]:
        """The archive as JSON data: every field, the session file as its own export writes it."""
        data = self.model_dump(mode="json", exclude={"session"})
        # A snapshot's state keeps exactly the keys it was taken with (older ones lack some, and a restore
        # reads their absence).
        for snapshot, model in zip(data["snapshots"], self.snapshots, strict=True):
            snapshot["state"] = model.state.model_dump(mode="json", exclude_unset=True)
        for message in data["messages"]:
            if message["version_of"] is None:
                del message["version_of"]
            if not message["attachment_name"]:
                del message["attachment_name"]
        return {"format": data.pop("format"), "version": data.pop("version"), "session": self.session.to_json(), **data}


def is_archive(data: Any) -> bool:
    """Whether parsed JSON says it is an archive (its ``format``); anything else is read as a session file."""
    return isinstance(data, dict) and data.get("format") == ARCHIVE_FORMAT
