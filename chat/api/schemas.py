"""The API's shapes for models, sessions and messages (the session file's is ``chat.formats.session_file``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ninja import Field, Schema

from chat.api.context_schemas import ContextOut, StrictIn
from chat.models import Message, Session
from chat.selectors.context import session_sampling
from chat.selectors.sessions import model_availability
from engine.core.text import without_credentials
from engine.llm.types import HostReport, Sampling


class ModelOut(Schema):
    name: str
    backend: str
    parameter_size_b: float | None
    context_length: int | None


class HostFailureOut(Schema):
    at: datetime
    error: str


class HostOut(Schema):
    """A model host as staff see it (``GET /api/hosts``): never with the credentials its URL may carry."""

    url: str
    backend: str = Field(description="embedded (the bundled model server) or ollama")
    up: bool = Field(description="Whether it answered just now.")
    models: list[str] = Field(description="Every model it lists, whatever its name (as last listed, when down).")
    running: int = Field(description="Generations this process has running on it now.")
    queued_turns: int
    queued_background: int = Field(description="Summaries, agings and merges waiting for a slot.")
    served: int = Field(description="Requests of this process it answered whole since the process started.")
    failed: int = Field(description="Requests of this process that failed on it (for want of the host), apart.")
    longest_background_wait_seconds: float
    failures: list[HostFailureOut] = Field(description="Its most recent failures, oldest first.")

    @staticmethod
    def of(report: HostReport) -> HostOut:
        return HostOut(
            url=without_credentials(report.url),
            backend=report.backend,
            up=report.up,
            models=list(report.models),
            running=report.state.running,
            queued_turns=report.state.queued_turns,
            queued_background=report.state.queued_background,
            served=report.served,
            failed=report.failed,
            longest_background_wait_seconds=round(report.state.longest_background_wait, 3),
            failures=[
                HostFailureOut(at=datetime.fromtimestamp(f.at, UTC), error=without_credentials(f.error))
                for f in report.failures
            ],
        )


class ContextSizeOut(Schema):
    size: int = Field(description="The selection, e.g. 16384.")
    ollama_context_size: int = Field(description="The num_ctx sent to the model: a session's max_tokens.")
    tier: int
    tier_name: str
    label: str


class SessionIn(StrictIn):
    title: str = ""
    model: str
    context_size: int
    system_prompt: str = ""


class BranchIn(StrictIn):
    message_id: int | None = Field(None, description="The id of the last message the branch shares with its session.")
    position: int | None = Field(None, description="Or its position (1 = the first message).")


class SessionPatch(StrictIn):
    title: str | None = None
    model: str | None = None
    context_size: int | None = None
    system_prompt: str | None = None
    summary_model: str | None = None
    settings: dict[str, Any] | None = Field(
        None,
        description='The spec\'s configuration overrides, e.g. {"compression": {"strategy": "truncate"}}, and how '
        'replies are sampled, in Ollama\'s option names: {"sampling": {"temperature": 0.7, "repeat_penalty": 1.1, '
        '"top_k": 40, "top_p": 0.9, "repeat_last_n": 64, "seed": 1}} (temperature 0-2, repeat_penalty 0.5-2, top_k '
        ">= 0, top_p 0-1; null or left out: the global default, else the model's). Replaces the session's previous "
        "overrides, all sections. Keys in the spec's camelCase (preserveRecent) or snake_case, stored in snake_case.",
    )


class SamplingOut(Schema):
    """How the session's replies are sampled: its settings over the global defaults; null: the model's default."""

    temperature: float | None
    top_k: int | None
    top_p: float | None
    repeat_penalty: float | None
    repeat_last_n: int | None
    seed: int | None


class SessionOut(Schema):
    id: UUID
    title: str
    model: str
    context_size: int
    max_tokens: int
    tier: int
    compression_count: int
    created_at: datetime
    last_activity: datetime
    system_prompt: str
    summary_model: str
    settings: dict[str, Any] = Field(description="This session's overrides of the global context settings.")
    sampling: SamplingOut = Field(
        description="How its replies are sampled: its settings over the global defaults; null: the model's default "
        "(Ollama's and the bundled model's: temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1 over the last 64 "
        "tokens). A request through the Ollama or OpenAI endpoint may set other values for itself."
    )
    source_session_id: str | None = Field(
        description="The sessionId of the OLLM session file it was imported from, which its export writes back; "
        "null for a session started here (or imported as a copy), exported under its own id."
    )
    source_provider: str | None = Field(
        description="The provider the imported file named, which its export writes back; null when it named none."
    )
    client: str | None = Field(
        description="The client (its User-Agent) that started it through the Ollama (/ollama/) or OpenAI (/v1/) "
        "endpoint; null for a session started here."
    )
    parent_id: UUID | None = Field(
        description="The session it branched from (POST /sessions/{id}/branch, or a Regenerate or Edit of an outside "
        "client); null for a session that is not a branch, or whose parent was deleted."
    )
    forked_at_position: int | None = Field(
        description="The position of the last message a branch shares with its parent; null for a session that is "
        "not a branch."
    )

    model_available: bool | None = Field(
        description="Whether a backend serves the session's model now, read when asked (a session imported from "
        "a file whose model is not served here is kept whole and says false until the model is served or switched "
        "with PATCH); null when no backend answers at all."
    )
    available_models: list[str] = Field(
        description="The models served here now: what PATCH may switch the session's model to."
    )

    @staticmethod
    def resolve_sampling(obj: Session) -> Sampling:
        return session_sampling(obj)

    @staticmethod
    def resolve_model_available(obj: Session) -> bool | None:
        return model_availability(model=obj.model).available

    @staticmethod
    def resolve_available_models(obj: Session) -> list[str]:
        return list(model_availability(model=obj.model).served)

    @staticmethod
    def resolve_source_session_id(obj: Session) -> str | None:
        return obj.source_session_id or None

    @staticmethod
    def resolve_source_provider(obj: Session) -> str | None:
        return obj.source_provider or None

    @staticmethod
    def resolve_client(obj: Session) -> str | None:
        return obj.client or None


class ImportConflictOut(Schema):
    detail: str
    session_id: UUID = Field(description="Your session that already has the file's sessionId.")


class AttachmentIn(StrictIn):
    name: str = Field(description="The file's name; only its last part is kept (notes.md of docs/notes.md).")
    text: str = Field(description="The file's text, at most 100,000 bytes of UTF-8, no binary data.")


class MessageIn(StrictIn):
    content: str
    attachment: AttachmentIn | None = Field(
        None,
        description="A text file sent with the message, as the chat page's 📎 sends it: its text is stored in the "
        "message (a fenced block headed by its name), counted, compressed and recalled like the rest; 422 naming "
        "what is wrong for a file that is too large, binary or of a kind not read as text (nothing is stored).",
    )
    max_tokens: int | None = Field(
        None,
        description="Your cap on the reply, a positive integer of at most the session's reply cap "
        '(OLLM_REPLY_MAX_TOKENS, at most 15% of its context): the reply stops there with done_reason "length".',
    )


class MessageOut(Schema):
    id: int
    position: int
    role: str
    content: str
    tokens: int
    tokens_exact: bool
    done_reason: str
    created_at: datetime
    compressed_into: int | None = Field(description="The checkpoint that stands for it in the active context.")
    in_active_context: bool
    tool_call_id: str
    tool_name: str
    tool_args: Any = Field(
        None, description="A tool call's arguments, as the model gave them; null for a message that is no call."
    )
    tool_result: Any = Field(None, description="A tool result's structured value, when it had one besides its text.")
    version_of: int | None = Field(
        None,
        description="The first version of the message this one is another version of (a regenerated reply, "
        "an edited message); null for a first version. GET .../messages/{id}/versions lists them all.",
    )
    attachment_name: str = Field(
        "", description="The text file sent with the message (its text is in ``content``); empty when none."
    )

    @staticmethod
    def resolve_compressed_into(obj: Message) -> int | None:
        return obj.compressed_into_id

    @staticmethod
    def resolve_version_of(obj: Message) -> int | None:
        return obj.version_of_id

    @staticmethod
    def resolve_in_active_context(obj: Message) -> bool:
        return obj.compressed_into_id is None and not obj.excluded_from_context


class TurnOut(Schema):
    user_message: MessageOut
    assistant_message: MessageOut
    context: ContextOut
    prompt_tokens: int
    prompt_exact: bool
    compression_running: bool = Field(description="A compression this turn triggered has not finished yet.")
