"""The conversation domain's models: sessions, their messages, checkpoints, goals, snapshots and events.

The checkpoints, goals, snapshots and events came from the contextmgr app (issue 33) and keep its
tables (``Meta.db_table``). Django finds an app's models in this package, which lists every name of its
modules (the old ``chat.models`` and ``contextmgr.models``).
"""

from chat.models.checkpoint_fields import (
    CHECKPOINT_FIELDS_ADDED_LATER,
    CHECKPOINT_NOT_IN_STATE,
    CHECKPOINT_RANGE_FIELDS,
    CHECKPOINT_STATE_FIELDS,
    checkpoint_attname,
)
from chat.models.checkpoints import LEVEL_CHOICES, Checkpoint, CheckpointRevision
from chat.models.events import ContextEvent, EventType
from chat.models.goals import MAX_GOAL_CHARS, MAX_PATH_CHARS, Artifact, Decision, Goal, GoalCheckpoint
from chat.models.messages import Message
from chat.models.sessions import (
    CONTEXT_SIZE_CHOICES,
    DEFAULT_CONTEXT_SIZE,
    MAX_MESSAGE_CHARS,
    MAX_MODEL_NAME_LENGTH,
    MAX_SOURCE_FIELD_LENGTH,
    MAX_SYSTEM_PROMPT_CHARS,
    MAX_TITLE_LENGTH,
    ChatDefaults,
    ClientTask,
    Session,
    check_length,
)
from chat.models.snapshots import ImmutableError, Snapshot, SnapshotQuerySet

__all__ = [
    "CHECKPOINT_FIELDS_ADDED_LATER",
    "CHECKPOINT_NOT_IN_STATE",
    "CHECKPOINT_RANGE_FIELDS",
    "CHECKPOINT_STATE_FIELDS",
    "CONTEXT_SIZE_CHOICES",
    "DEFAULT_CONTEXT_SIZE",
    "LEVEL_CHOICES",
    "MAX_GOAL_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_MODEL_NAME_LENGTH",
    "MAX_PATH_CHARS",
    "MAX_SOURCE_FIELD_LENGTH",
    "MAX_SYSTEM_PROMPT_CHARS",
    "MAX_TITLE_LENGTH",
    "Artifact",
    "ChatDefaults",
    "Checkpoint",
    "CheckpointRevision",
    "ClientTask",
    "ContextEvent",
    "Decision",
    "EventType",
    "Goal",
    "GoalCheckpoint",
    "ImmutableError",
    "Message",
    "Session",
    "Snapshot",
    "SnapshotQuerySet",
    "check_length",
    "checkpoint_attname",
]
