"""REST endpoints for models, sessions, messages and session files: parse, check ownership, call, shape."""

# No `from __future__ import annotations` here: ninja reads the views' annotations
# as real types to build their parameter models.

from typing import Annotated, Any, Literal
from uuid import UUID

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Router, Status, UploadedFile
from ninja.errors import HttpError
from ninja.pagination import paginate
from ninja.params.functions import File, Query

from accounts.auth import api_user
from chat.api.context_schemas import ContextOut
from chat.api.pagination import Pages
from chat.api.responses import after_sent
from chat.api.schemas import (
    BranchIn,
    ContextSizeOut,
    HostOut,
    ImportConflictOut,
    MessageIn,
    MessageOut,
    ModelOut,
    SessionIn,
    SessionOut,
    SessionPatch,
    TurnOut,
)
from chat.formats.archive_file import SessionArchive, is_archive
from chat.formats.file_checks import MAX_IMPORT_BYTES, ImportTooLarge
from chat.formats.session_file import SessionFile
from chat.models import Message, Session
from chat.selectors.context import active_messages
from chat.selectors.sessions import (
    message_of_session,
    message_versions,
    model_hosts,
    models_available,
    session_for_owner,
    session_history,
    sessions_for_user,
)
from chat.services.attachments import Attachment
from chat.services.events import history_publish
from chat.services.files import (
    import_throttle,
    session_archive,
    session_archive_import,
    session_file_build,
    session_file_import,
    session_file_load,
)
from chat.services.revisions import message_version_choose
from chat.services.sessions import session_branch, session_delete, session_start, session_update
from chat.services.turn import TurnSend, turn_run
from engine.core.config import reply_max_tokens
from engine.resources import context_profiles

router = Router(tags=["sessions"])


@router.get("/models", response=list[ModelOut], tags=["models"], summary="List the models you can chat with")
def models_list(request: HttpRequest) -> Any:
    """Every model of every backend that answers now."""
    return models_available()


@router.get(
    "/hosts", response=list[HostOut], tags=["models"], summary="List the model hosts and how busy they are (staff only)"
)
def hosts_list(request: HttpRequest) -> Any:
    """The bundled model server and every Ollama host (``OLLAMA_HOSTS``): whether each answers now,
    its models, what this process has running and queued on it, and its recent failures. Staff only
    (403 for anyone else): the hosts are the operators' business; a user sees whether a session's
    model is available (``model_available``)."""
    if not api_user(request).is_staff:
        raise HttpError(403, "The model hosts are shown to staff only.")
    return [HostOut.of(report) for report in model_hosts()]


@router.get("/context-sizes", response=list[ContextSizeOut], tags=["models"], summary="List the context sizes")
def context_sizes_list(request: HttpRequest) -> Any:
    """The selectable context sizes with their num_ctx and tier."""
    return [
        ContextSizeOut(
            size=p.size,
            ollama_context_size=p.ollama_context_size,
            tier=p.tier.number,
            tier_name=p.tier.name,
            label=p.label,
        )
        for p in context_profiles()
    ]


@router.post("/sessions", response={201: SessionOut}, summary="Start a session")
def session_create_view(request: HttpRequest, payload: SessionIn) -> Any:
    """A new conversation with a model one of the backends has (422 for any other), its budget set
    from the context size and the system prompt's tokens."""
    session = session_start(
        owner=api_user(request),
        model=payload.model,
        context_size=payload.context_size,
        title=payload.title,
        system_prompt=payload.system_prompt,
    )
    return Status(201, session)


@router.get("/sessions", response=list[SessionOut], summary="List your sessions")
@paginate(Pages)
def sessions_list(request: HttpRequest) -> QuerySet[Session]:
    """The caller's sessions, most recently active first."""
    return sessions_for_user(user=api_user(request))


@router.post(
    "/sessions/import",
    response={200: SessionOut, 201: SessionOut, 409: ImportConflictOut},
    summary="Import a session file",
    openapi_extra={
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {"file": {"type": "string", "format": "binary"}},
                        "required": ["file"],
                    }
                },
                "application/json": {"schema": {"$ref": "#/components/schemas/SessionFile"}},
            }
        }
    },
)
def session_import_view(
    request: HttpRequest,
    context_size: Annotated[int | None, Query(None, gt=0)] = None,
    title: str | None = None,
    file: Annotated[UploadedFile | None, File(None)] = None,
    on_existing: Literal["refuse", "update", "copy"] = "refuse",
) -> Any:
    """A new session (201) from an OLLM session file, sent as the multipart field ``file`` or as the JSON body.

    Files over 2 MiB or with more than 5,000 messages and tool calls are refused with 413;
    a malformed one with 422; more than ``OLLM_IMPORTS_PER_MINUTE`` imports a minute (10) with 429.
    ``context_size`` and ``title`` override the file's metadata. The new session does not compress
    until its first turn or an explicit compression. A file is never refused for its model: one no
    backend serves here is imported whole, and the session says ``model_available: false``.
    It keeps the file's ``sessionId`` and ``provider``
    (``source_session_id``, ``source_provider``), and its export writes them back.

    A file whose ``sessionId`` is one of your sessions already (imported from that file, or started here
    and exported) is refused with 409, naming that session (``session_id``), unless ``on_existing`` says
    otherwise: ``update`` adds to that session the messages the file has after those it holds (200;
    nothing it holds is changed or removed, and no ``title`` or ``context_size`` may be given; 409 when the
    two histories went separate ways), ``copy`` imports it as a new session under its own id.
    """
    owner = api_user(request)
    throttled = import_throttle(owner=owner)
    if throttled is not None:
        raise HttpError(429, throttled.message)
    if file is not None:
        if (file.size or 0) > MAX_IMPORT_BYTES:
            raise ImportTooLarge(f"The file is {file.size:,} bytes; the limit is {MAX_IMPORT_BYTES:,}.")
        raw = file.read(MAX_IMPORT_BYTES + 1)
    elif request.content_type != "application/json":
        raise HttpError(415, 'Send the file as the multipart field "file", or as an application/json body.')
    else:
        # Checked before the body is read, so a huge body is never held in memory.
        length = request.META.get("CONTENT_LENGTH") or "0"
        if not length.isdigit() or int(length) > MAX_IMPORT_BYTES:
            raise ImportTooLarge(f"The body is {length} bytes; the limit is {MAX_IMPORT_BYTES:,}.")
        raw = request.body
    data = session_file_load(raw)
    # An archive (GET /sessions/{id}/archive, "format": "ollm-site-archive") is an identical copy of its
    # session, always a new one under new ids (on_existing does not apply); a context_size cannot override
    # its own (422). See chat.services.files.archive.
    if is_archive(data):
        return Status(201, session_archive_import(owner=owner, data=data, context_size=context_size, title=title))
    imported = session_file_import(
        owner=owner, data=data, context_size=context_size, title=title, on_existing=on_existing
    )
    return Status(201 if imported.created else 200, imported.session)


@router.get("/sessions/{session_id}", response=SessionOut, summary="Get a session")
def session_detail(request: HttpRequest, session_id: UUID) -> Session:
    """Its settings, budget, compression count and reliability score."""
    return session_for_owner(user=api_user(request), session_id=session_id)


@router.patch("/sessions/{session_id}", response=SessionOut, summary="Change a session")
def session_patch(request: HttpRequest, session_id: UUID, payload: SessionPatch) -> Session:
    """Change the session; a new model or context size re-evaluates the budget at once."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    return session_update(
        session=session,
        title=payload.title,
        model=payload.model,
        context_size=payload.context_size,
        system_prompt=payload.system_prompt,
        summary_model=payload.summary_model,
        settings=payload.settings,
    )


@router.post("/sessions/{session_id}/branch", response={201: SessionOut}, summary="Branch a session at a message")
def session_branch_view(request: HttpRequest, session_id: UUID, payload: BranchIn) -> Any:
    """A new session (201) that shares this one's history up to a message, named by ``message_id`` or by
    ``position`` (one of them; 422 for both or neither, 404 for a message the session does not have). It
    starts from the managed state the session had at that message: the goals with their progress, the
    decisions, the artifacts and the checkpoints (those of the latest snapshot at or before it when a later
    compression took messages after it); what was compressed then stays compressed. The session itself is
    not changed; the branch names it (``parent_id``, ``forked_at_position``)."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    if (payload.message_id is None) == (payload.position is None):
        raise HttpError(422, "Name the message by message_id or by position (one of them).")
    message = message_of_session(session=session, message_id=payload.message_id, position=payload.position)
    return Status(201, session_branch(session=session, at_message=message))


@router.delete("/sessions/{session_id}", response={204: None}, summary="Delete a session")
def session_delete_view(request: HttpRequest, session_id: UUID) -> Any:
    """With its whole history, checkpoints, goals, snapshots and events."""
    session_delete(session=session_for_owner(user=api_user(request), session_id=session_id))
    return Status(204, None)


@router.get(
    "/sessions/{session_id}/export",
    response=SessionFile,
    by_alias=True,
    exclude_none=True,
    summary="Export a session file",
)
def session_export(request: HttpRequest, session_id: UUID) -> Any:
    """The OLLM session file: every message and tool call, compressed or not."""
    return session_file_build(session=session_for_owner(user=api_user(request), session_id=session_id))


@router.get("/sessions/{session_id}/archive", response=SessionArchive, by_alias=True, summary="Archive a whole session")
def session_archive_view(request: HttpRequest, session_id: UUID) -> Any:
    """Everything of the session: the OLLM session file (under ``session``), its settings, each message's
    context state, checkpoints with their revisions, facts and ledgers, goals, decisions, artifacts,
    snapshots and events. ``POST /sessions/import`` rebuilds it as an identical session."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    # Written as built: a snapshot's state keeps exactly its own keys (the schema's defaults are not added).
    return JsonResponse(session_archive(session=session), json_dumps_params={"ensure_ascii": False})


@router.get("/sessions/{session_id}/messages", response=list[MessageOut], summary="List a session's messages")
@paginate(Pages)
def messages_list(request: HttpRequest, session_id: UUID, include_compressed: bool = False) -> QuerySet[Message]:
    """The messages of the active context in order, or with ``include_compressed`` the full history."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    if include_compressed:
        return session_history(session=session)
    return active_messages(session=session)


@router.get(
    "/sessions/{session_id}/messages/{message_id}/versions",
    response=list[MessageOut],
    summary="List a message's versions",
)
def message_versions_list(request: HttpRequest, session_id: UUID, message_id: int) -> Any:
    """Every version of a regenerated reply or an edited message, first first (the message alone when
    it has no other); the one in the context has ``in_active_context``."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    return message_versions(message=message_of_session(session=session, message_id=message_id))


@router.post(
    "/sessions/{session_id}/messages/{message_id}/versions/choose",
    response=list[MessageOut],
    summary="Choose a message's version",
)
def message_version_choose_view(request: HttpRequest, session_id: UUID, message_id: int) -> Any:
    """Make this version the one in the context, with the messages that followed it; the version in
    the context until now and what followed it leave the context (kept in the full history). The
    versions as they stand after it. 422 when none of its versions is in the context, or when either
    tail is already compressed."""
    session = session_for_owner(user=api_user(request), session_id=session_id)
    message = message_of_session(session=session, message_id=message_id)
    message_version_choose(session=session, message=message)
    history_publish(session_id=session.pk)
    return message_versions(message=message)


@router.post("/sessions/{session_id}/messages", response=TurnOut, summary="Send a message and get the reply")
def message_send(
    request: HttpRequest, session_id: UUID, payload: MessageIn, response: HttpResponse, wait_compression: bool = False
) -> Any:
    """One full turn without streaming: the message is stored first, then the reply.

    ``max_tokens`` caps the reply under the session's cap (422 beyond it, before anything is stored).
    A message that cannot fit the context is refused with 413 and stays in the history. On a session
    whose model is not served here (``model_available: false``) the message is stored and the turn is
    409 (503 when the model's backend is only down), naming the model and how to switch (PATCH its ``model``).
    """
    session = session_for_owner(user=api_user(request), session_id=session_id)
    cap = reply_max_tokens(session.max_tokens, settings.OLLM_REPLY_MAX_TOKENS)
    if payload.max_tokens is not None and not 0 < payload.max_tokens <= cap:
        message = f"max_tokens must be a positive integer of at most {cap:,} (the reply cap)."
        raise ValidationError({"max_tokens": message})
    attached = payload.attachment
    attachment = Attachment(attached.name, attached.text) if attached is not None else None
    try:
        # The turn settled: its messages and the context as they stand after it (a compression the turn
        # made due has ended, when asked to wait for it), and whether a compression still runs.
        outcome = turn_run(
            session_id=session.pk,
            variant=TurnSend(payload.content, attachment=attachment),
            max_tokens=payload.max_tokens,
            compression_wait_seconds=settings.OLLM_COMPRESSION_WAIT_SECONDS if wait_compression else 0,
        )
    except BaseException:
        # The message is stored whatever became of the reply: the session's open pages show it.
        history_publish(session_id=session.pk)
        raise
    # Once the answer is sent: the open pages append the turn's two messages, and their rendering
    # (in this process) does not hold up the answer.
    after_position = outcome.user_message.position - 1
    after_sent(response, lambda: history_publish(session_id=session.pk, after_position=after_position))
    return {
        "user_message": outcome.user_message,
        "assistant_message": outcome.assistant_message,
        "context": ContextOut.of_report(outcome.context),
        "prompt_tokens": outcome.prompt_tokens,
        "prompt_exact": outcome.prompt_exact,
        "compression_running": outcome.compression_running,
    }
