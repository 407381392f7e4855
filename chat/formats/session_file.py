"""The OLLM session file: the one model of it, for the import, the export and the OpenAPI document.

The shape is the OLLM CLI's ``Session`` (``packages/core/src/services/types.ts``), the file its
``ChatRecordingService`` writes to ``~/.ollm/sessions/{sessionId}.json`` and reads back::

    {sessionId, startTime, lastActivity, model, provider,
     messages: [{role, parts: [{type: "text", text}], timestamp}],
     toolCalls: [{id, name, args, result: {llmContent, returnDisplay?}, timestamp}],
     metadata: {tokenCount, compressionCount, modeHistory?}}

An export fills every one of those fields, times as the CLI writes them (``2026-01-27T14:02:11.482Z``),
and gives an imported session's ``sessionId`` and ``provider`` back as the file had them. ollm-site adds,
where the CLI does not look:
``metadata.title``, ``metadata.contextSize`` and ``metadata.systemPrompt`` (what an import needs
to rebuild the same session) and a tool result's ``data`` (its structured result).

An import needs only ``model`` and ``messages``: everything else may be missing, and fields the
model does not know are ignored; the CLI's ``modeHistory``, a tool result's ``returnDisplay`` and a
message's split into several text parts are kept and written back as they were. What is read is checked completely:
types, string lengths, times, NUL characters and unpaired surrogates (the database could not
store them), the nesting of a tool call's free JSON, and the number of entries.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from chat.formats.file_checks import (
    TOO_MANY_ENTRIES,
    Compressions,
    ContextTokens,
    Count,
    check_json,
    free_json,
    iso_time,
    storable,
)
from chat.models import MAX_MESSAGE_CHARS, MAX_MODEL_NAME_LENGTH, MAX_SYSTEM_PROMPT_CHARS, MAX_TITLE_LENGTH
from engine.core.times import iso_millis

# Messages and tool calls together.
MAX_IMPORT_ENTRIES = 5_000
MAX_NAME_CHARS = 200


# Strings that are stored: bounded, and only what the database can hold.
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(storable)]
ModelName = Annotated[str, Field(max_length=MAX_MODEL_NAME_LENGTH), AfterValidator(storable)]
Title = Annotated[str, Field(max_length=MAX_TITLE_LENGTH), AfterValidator(storable)]
SystemPrompt = Annotated[str, Field(max_length=MAX_SYSTEM_PROMPT_CHARS), AfterValidator(storable)]
MessageText = Annotated[str, Field(max_length=MAX_MESSAGE_CHARS), AfterValidator(storable)]


# Written as text in every kind of dump, in the one format of the app's times (``iso_millis``): what the
# CLI writes, so a time the file gave comes back exactly as it was written.
IsoTime = Annotated[
    datetime,
    BeforeValidator(iso_time),
    PlainSerializer(iso_millis, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


def _llm_content(value: Any) -> Any:
    if value is None:
        raise PydanticCustomError("missing", "is required")
    if isinstance(value, str) and len(value) > MAX_MESSAGE_CHARS:
        raise PydanticCustomError("string_too_long", "too long", {"max_length": MAX_MESSAGE_CHARS})
    check_json(value, 4)  # file > toolCalls > [i] > result > llmContent
    return value


Role = Literal["user", "assistant", "system", "tool"]


class _FileModel(BaseModel):
    # camelCase in the file, snake_case in Python; strict: no "16384" for 16384, no 1 for "1".
    # The OpenAPI document has one schema of the file, built from the export's (serialization) side and
    # named by the import too: a field with a default must stay optional there, as it is for an import.
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        serialize_by_alias=True,
        strict=True,
        json_schema_serialization_defaults_required=False,
    )


class SessionFilePart(_FileModel):
    type: Literal["text"]
    text: MessageText


class SessionFileMessage(_FileModel):
    role: Role = Field(
        description="A tool result the CLI kept as a message is imported as one without a call id; "
        "an export writes every tool result into toolCalls."
    )
    parts: list[SessionFilePart]
    timestamp: IsoTime | None = None

    @field_validator("parts")
    @classmethod
    def _fits_one_message(cls, parts: list[SessionFilePart]) -> list[SessionFilePart]:
        total = sum(len(part.text) for part in parts)
        if total > MAX_MESSAGE_CHARS:
            raise PydanticCustomError(
                "parts_too_long",
                "hold {total} characters; the limit is {limit}",
                {"total": f"{total:,}", "limit": f"{MAX_MESSAGE_CHARS:,}"},
            )
        return parts

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.parts)


class SessionFileToolResult(_FileModel):
    llm_content: Annotated[Any, AfterValidator(_llm_content)] = Field(
        description="The text the model reads. A structured value (from another tool) is read as its JSON text."
    )
    return_display: str | None = Field(
        default=None, description="The CLI's display text; kept and written back, never shown to the model."
    )
    data: Annotated[Any, free_json(4)] = Field(default=None, description="ollm-site: the structured result, if any.")


class SessionFileToolCall(_FileModel):
    id: Name
    name: Name
    args: Annotated[dict[str, Any], free_json(3)] = Field(default_factory=dict)
    result: SessionFileToolResult
    timestamp: IsoTime | None = None


class SessionFileMetadata(_FileModel):
    # Not imported (an import derives both again), so not held to strict types either.
    token_count: Count = Field(
        default=0, strict=False, description="Tokens of the full history: every message and tool call in the file."
    )
    compression_count: Compressions = Field(
        default=0, strict=False, description="Compressions so far; an import starts at 0."
    )
    title: Title | None = Field(default=None, description="ollm-site: the session's title.")
    context_size: ContextTokens | None = Field(
        default=None, description="ollm-site: the context size selection, e.g. 16384."
    )
    system_prompt: SystemPrompt | None = Field(default=None, description="ollm-site: the session's system prompt.")
    mode_history: Annotated[Any, free_json(4)] = Field(
        default=None, description="The CLI's mode changes: kept as they are and written back."
    )


class SessionFile(_FileModel):
    """The OLLM session file: the full, uncompressed history of a session, as the OLLM CLI writes and reads it."""

    session_id: Name | None = None
    start_time: IsoTime | None = None
    last_activity: IsoTime | None = None
    model: ModelName
    provider: Name | None = None
    messages: list[SessionFileMessage]
    tool_calls: list[SessionFileToolCall] = Field(default_factory=list)
    metadata: SessionFileMetadata = Field(default_factory=SessionFileMetadata)

    @model_validator(mode="before")
    @classmethod
    def _not_too_many_entries(cls, data: Any) -> Any:
        """Counted before anything else is checked, so a huge file is refused as too large."""
        if isinstance(data, dict):
            lists = [data.get(key) for key in ("messages", "toolCalls", "tool_calls")]
            count = sum(len(value) for value in lists if isinstance(value, list))
            if count > MAX_IMPORT_ENTRIES:
                raise PydanticCustomError(
                    TOO_MANY_ENTRIES,
                    "The file holds {count} messages and tool calls; the limit is {limit}.",
                    {"count": f"{count:,}", "limit": f"{MAX_IMPORT_ENTRIES:,}"},
                )
        return data

    def to_json(self) -> dict[str, Any]:
        """The file as JSON data: camelCase names, and no field that has no value."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
