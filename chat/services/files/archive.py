"""The archive of a session (``chat.formats.archive_file.SessionArchive``): written whole (built by
``chat.services.files.archive_export``), and imported as an identical session for the importing user, with new
primary keys and every reference remapped (each entry's fields as ``chat.formats.archive_fields`` maps them, both ways).

The export (``chat.services.files.export``) and the import of a session file (``chat.services.files.imports``)
are unchanged: the archive holds the very file the export writes, and the import endpoint hands an
archive (its ``format``) here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction

from chat.formats import archive_fields
from chat.formats.archive_file import (
    CHECKPOINT_KEYS,
    CHECKPOINT_LIST_KEYS,
    SNAPSHOT_KEYS,
    ArchiveMessage,
    SessionArchive,
)
from chat.formats.file_checks import ImportTooLarge, validated
from chat.formats.session_file import SessionFile
from chat.models import (
    Artifact,
    Checkpoint,
    CheckpointRevision,
    ContextEvent,
    Decision,
    Goal,
    GoalCheckpoint,
    Message,
    Snapshot,
)
from chat.models import Session as ChatSession
from chat.selectors.sessions import ModelFacts, session_for_file
from chat.services.files.archive_export import session_archive_build
from chat.services.files.imports import IMPORTED_TITLE
from chat.services.sessions import session_start
from engine.core.tiers import UnknownContextSize
from engine.resources import context_profile


class ArchiveTooLarge(ImportTooLarge):
    """The archive holds more than MAX_IMPORT_ENTRIES entries in one of its lists (the import answers 413)."""


def session_archive(*, session: ChatSession) -> dict[str, Any]:
    """The archive as JSON data, as the page, the API and the terminal command write it."""
    return session_archive_build(session=session).to_json()


def session_archive_parse(data: Any) -> SessionArchive:
    """The archive checked completely; ValidationError names each problem's place
    (``archive.checkpoints[2].level``), ArchiveTooLarge one with too many entries."""
    return validated(SessionArchive, data, document="archive", too_large=ArchiveTooLarge)


@dataclass(frozen=True)
class _Entry:
    """One message of the history: its context state and what the file holds of it."""

    state: ArchiveMessage
    content: str
    tool_call_id: str = ""
    tool_name: str = ""
    tool_args: Any = None
    tool_result: Any = None
    # How the file wrote it (Message.source_format), as a session file's import keeps it.
    source_format: dict[str, Any] | None = None


def _refused(where: str, problem: str) -> ValidationError:
    return ValidationError(f"archive.{where}: {problem}")


def _unique(rows: Iterable[Any], where: str) -> set[int]:
    seen: set[int] = set()
    for index, row in enumerate(rows):
        if row.id in seen:
            raise _refused(f"{where}[{index}].id", f"{row.id} is used twice")
        seen.add(row.id)
    return seen


def _known(value: int | None, ids: set[int], where: str, what: str) -> None:
    if value is not None and value not in ids:
        raise _refused(where, f"refers to {what} {value}, which the archive does not hold")


def _history(archive: SessionArchive) -> list[_Entry]:
    """The file's messages and tool calls as one history, in the order of ``archive.messages``."""
    file = archive.session
    if len(archive.messages) != len(file.messages) + len(file.tool_calls):
        raise _refused(
            "messages",
            f"holds {len(archive.messages):,} entries; the session file holds "
            f"{len(file.messages) + len(file.tool_calls):,} messages and tool calls",
        )
    entries, said, calls = [], iter(enumerate(file.messages)), iter(enumerate(file.tool_calls))
    last = 0
    for index, state in enumerate(archive.messages):
        if state.position <= last:
            raise _refused(f"messages[{index}].position", "must be greater than the one before")
        last = state.position
        if state.role == "tool":
            _, call = next(calls, (None, None))
            if call is None:
                raise _refused(f"messages[{index}].role", "is a tool call the session file does not hold")
            content = call.result.llm_content
            entries.append(
                _Entry(
                    state,
                    # Another tool's structured result is read as its JSON text, as a session file's import reads it.
                    content if isinstance(content, str) else json.dumps(content, ensure_ascii=False),
                    call.id,
                    call.name,
                    call.args,
                    call.result.data,
                    {"returnDisplay": call.result.return_display} if call.result.return_display is not None else None,
                )
            )
            continue
        number, message = next(said, (None, None))
        if message is None or number is None:
            raise _refused(f"messages[{index}].role", "is a message the session file does not hold")
        if message.role != state.role:
            raise _refused(
                f"messages[{index}].role", f'is "{state.role}"; session.messages[{number}] is "{message.role}"'
            )
        parts = {"parts": [len(part.text) for part in message.parts]} if len(message.parts) > 1 else None
        entries.append(_Entry(state, message.text, source_format=parts))
    return entries


def _check_references(archive: SessionArchive) -> list[_Entry]:
    """Every reference points at something the archive holds; the history, in order."""
    if archive.session.metadata.context_size is None:
        raise _refused("session.metadata.contextSize", "is required in an archive")
    try:
        context_profile(archive.session.metadata.context_size)
    except UnknownContextSize as exc:
        raise _refused("session.metadata.contextSize", str(exc)) from exc
    entries = _history(archive)
    positions = {m.position for m in archive.messages}
    checkpoints = _unique(archive.checkpoints, "checkpoints")
    goals = _unique(archive.goals, "goals")
    _unique(archive.decisions, "decisions")
    _unique(archive.artifacts, "artifacts")
    snapshots = _unique(archive.snapshots, "snapshots")
    for i, m in enumerate(archive.messages):
        _known(m.compressed_into, checkpoints, f"messages[{i}].compressed_into", "checkpoint")
        _known(m.version_of, positions, f"messages[{i}].version_of", "message position")
    for i, cp in enumerate(archive.checkpoints):
        _known(cp.merged_into, checkpoints, f"checkpoints[{i}].merged_into", "checkpoint")
    for i, d in enumerate(archive.decisions):
        _known(d.goal, goals, f"decisions[{i}].goal", "goal")
    for i, a in enumerate(archive.artifacts):
        _known(a.goal, goals, f"artifacts[{i}].goal", "goal")
    for i, s in enumerate(archive.snapshots):
        where = f"snapshots[{i}].state"
        for j, (position, checkpoint, _) in enumerate(s.state.messages.states):
            _known(position, positions, f"{where}.messages.states[{j}][0]", "message position")
            _known(checkpoint, checkpoints, f"{where}.messages.states[{j}][1]", "checkpoint")
        for j, scp in enumerate(s.state.checkpoints):
            _known(scp.id, checkpoints, f"{where}.checkpoints[{j}].id", "checkpoint")
            _known(scp.merged_into, checkpoints, f"{where}.checkpoints[{j}].merged_into", "checkpoint")
    for i, e in enumerate(archive.events):
        for key in CHECKPOINT_KEYS:
            _payload_ref(e.payload.get(key), checkpoints, f"events[{i}].payload.{key}", "checkpoint")
        for key in CHECKPOINT_LIST_KEYS:
            values = e.payload.get(key)
            if values is not None and not isinstance(values, list):
                raise _refused(f"events[{i}].payload.{key}", "must be a list")
            for j, value in enumerate(values or []):
                _payload_ref(value, checkpoints, f"events[{i}].payload.{key}[{j}]", "checkpoint")
        for key in SNAPSHOT_KEYS:
            _payload_ref(e.payload.get(key), snapshots, f"events[{i}].payload.{key}", "snapshot")
    return entries


def _payload_ref(value: Any, ids: set[int], where: str, what: str) -> None:
    if value is None:
        return
    if type(value) is not int:
        raise _refused(where, f"must be a {what} id or null")
    _known(value, ids, where, what)


def session_archive_import(
    *,
    owner: Any,
    data: Any,
    title: str | None = None,
    context_size: int | None = None,
) -> ChatSession:
    """A new session of ``owner`` identical to the archived one (new ids, every reference remapped); all of it
    or, for a bad archive, nothing (a ValidationError names the field; ArchiveTooLarge: too many entries).

    ``title`` overrides the archived one; ``context_size`` is refused (an archive's checkpoints and snapshots
    were made for its own). No backend is asked about the model: the archive's own context size, num_ctx and
    parameter size are kept, and a model not served here is no reason to refuse it.
    """
    if context_size is not None:
        raise ValidationError({"context_size": "An archive keeps its own context size: import it without one."})
    archive = session_archive_parse(data)
    entries = _check_references(archive)
    try:
        return _archive_import(owner=owner, archive=archive, entries=entries, title=title, keep_file_id=True)
    except IntegrityError:
        # Another import gave the owner a session of this sessionId meanwhile (one per file and owner): nothing
        # of this one was kept, and it is made again as a copy under its own id.
        return _archive_import(owner=owner, archive=archive, entries=entries, title=title, keep_file_id=False)


def _created(rows: list[Any], entries: Iterable[Any], *also: str) -> None:
    """Give created rows their entries' times that the database set itself when it created them (auto_now_add,
    auto_now; bulk_update writes them as given), and the fields ``also`` set on the rows since."""
    if not rows:
        return
    model = type(rows[0])
    times = [
        field.name
        for field in model._meta.concrete_fields
        if isinstance(field, models.DateTimeField) and (field.auto_now or field.auto_now_add)
    ]
    for row, entry in zip(rows, entries, strict=True):
        for name in times:
            setattr(row, name, getattr(entry, name))
    model.objects.bulk_update(rows, [*times, *also])


def _reserve(model: type[models.Model], session: ChatSession, **fields: Any) -> int:
    """A fresh id of ``model``'s table that no row holds (made and deleted): a snapshot's goal, decision or
    artifact deleted since stands there again when the snapshot is restored, as it did in the source."""
    row = model._default_manager.create(session=session, **fields)
    pk: int = row.pk
    row.delete()
    return pk


@transaction.atomic
def _archive_import(
    *, owner: Any, archive: SessionArchive, entries: list[_Entry], title: str | None, keep_file_id: bool
) -> ChatSession:
    file: SessionFile = archive.session
    state = archive.state
    session = session_start(
        owner=owner,
        model=file.model,
        context_size=cast(int, file.metadata.context_size),
        title=title or file.metadata.title or IMPORTED_TITLE,
        system_prompt=file.metadata.system_prompt or "",
        summary_model=state.summary_model,
        settings=state.settings,
        facts=ModelFacts(),  # nothing asked: the archive's own num_ctx and parameter size are written below
    )

    goals = Goal.objects.bulk_create(Goal(session=session, **archive_fields.GOAL.values(g)) for g in archive.goals)
    _created(goals, archive.goals)
    goal_ids = {g.id: row.pk for g, row in zip(archive.goals, goals, strict=True)}
    pairs = [(goal_ids[g.id], c) for g in archive.goals for c in g.checkpoints]
    goal_checkpoints = GoalCheckpoint.objects.bulk_create(
        GoalCheckpoint(goal_id=goal_id, **archive_fields.GOAL_CHECKPOINT.values(c)) for goal_id, c in pairs
    )
    _created(goal_checkpoints, (c for _, c in pairs))
    decisions = Decision.objects.bulk_create(
        Decision(session=session, goal_id=goal_ids[d.goal] if d.goal else None, **archive_fields.DECISION.values(d))
        for d in archive.decisions
    )
    _created(decisions, archive.decisions)
    decision_ids = {d.id: row.pk for d, row in zip(archive.decisions, decisions, strict=True)}
    artifacts = Artifact.objects.bulk_create(
        Artifact(session=session, goal_id=goal_ids[a.goal] if a.goal else None, **archive_fields.ARTIFACT.values(a))
        for a in archive.artifacts
    )
    _created(artifacts, archive.artifacts)
    artifact_ids = {a.id: row.pk for a, row in zip(archive.artifacts, artifacts, strict=True)}

    checkpoints = Checkpoint.objects.bulk_create(
        Checkpoint(session=session, **archive_fields.CHECKPOINT.values(cp)) for cp in archive.checkpoints
    )
    checkpoint_ids = {cp.id: row.pk for cp, row in zip(archive.checkpoints, checkpoints, strict=True)}
    for cp, row in zip(archive.checkpoints, checkpoints, strict=True):
        row.merged_into_id = checkpoint_ids[cp.merged_into] if cp.merged_into else None
    _created(checkpoints, archive.checkpoints, "merged_into_id")
    pairs_r = [(checkpoint_ids[cp.id], r) for cp in archive.checkpoints for r in cp.revisions]
    revisions = CheckpointRevision.objects.bulk_create(
        CheckpointRevision(checkpoint_id=checkpoint_id, **archive_fields.REVISION.values(r))
        for checkpoint_id, r in pairs_r
    )
    _created(revisions, (r for _, r in pairs_r))

    messages = Message.objects.bulk_create(
        (
            Message(
                session=session,
                **archive_fields.MESSAGE.values(e.state),
                compressed_into_id=checkpoint_ids[e.state.compressed_into] if e.state.compressed_into else None,
                content=e.content,
                tool_call_id=e.tool_call_id,
                tool_name=e.tool_name,
                tool_args=e.tool_args,
                tool_result=e.tool_result,
                source_format=e.source_format,
            )
            for e in entries
        ),
        batch_size=500,
    )
    message_ids = {e.state.position: row.pk for e, row in zip(entries, messages, strict=True)}
    versions = []
    for e, stored in zip(entries, messages, strict=True):
        if e.state.version_of:
            stored.version_of_id = message_ids[e.state.version_of]
            versions.append(stored)
    Message.objects.bulk_update(versions, ["version_of_id"], batch_size=500)

    def reserving(known: dict[int, int], model: type[models.Model], **fields: Any) -> Callable[[int], int]:
        def mapping(local: int) -> int:
            if local not in known:
                known[local] = _reserve(model, session, **fields)
            return known[local]

        return mapping

    snapshot_ids: dict[int, int] = {}
    for s in archive.snapshots:
        snapshot = Snapshot.objects.create(
            session=session,
            **archive_fields.SNAPSHOT.values(s),
            state=archive_fields.remap_state(
                s.state.model_dump(mode="json", exclude_unset=True),
                session_id=str(session.id),
                message=message_ids.__getitem__,
                checkpoint=checkpoint_ids.__getitem__,
                goal=reserving(goal_ids, Goal, description=""),
                decision=reserving(decision_ids, Decision, description=""),
                artifact=reserving(artifact_ids, Artifact, path="", action=Artifact.Action.CREATED),
            ),
        )
        # Its own creation time, written in the transaction that creates it (Snapshot.objects refuses any
        # update: a stored snapshot never changes).
        models.QuerySet(model=Snapshot).filter(pk=snapshot.pk).update(created_at=s.created_at)
        snapshot_ids[s.id] = snapshot.pk

    events = ContextEvent.objects.bulk_create(
        ContextEvent(
            session=session,
            **archive_fields.EVENT.values(e),
            payload=archive_fields.remap_payload(e.payload, checkpoint=checkpoint_ids.get, snapshot=snapshot_ids.get),
        )
        for e in archive.events
    )
    _created(events, archive.events)

    ChatSession.objects.filter(pk=session.pk).update(
        # Not what session_start was given: it made the settings canonical.
        **archive_fields.STATE.values(state, without=("summary_model", "settings")),
        **_file_identity(owner, file, keep_file_id=keep_file_id),
    )
    session.refresh_from_db()
    return session


def _file_identity(owner: Any, file: SessionFile, *, keep_file_id: bool) -> dict[str, Any]:
    """The copy's session file names the archived one's sessionId and provider, as an import of that file
    would keep them (so the copy's export is the original's, and the CLI's later file of it is recognised),
    unless the owner holds a session of that sessionId already: then it is a copy under its own id."""
    file_id = (file.session_id or "") if keep_file_id else ""
    default_provider = "embedded" if file.model.startswith("embedded/") else "ollama"
    return {
        "source_session_id": file_id if session_for_file(user=owner, file_session_id=file_id) is None else "",
        "source_provider": "" if file.provider in (None, default_provider) else file.provider,
        "source_metadata": {"modeHistory": file.metadata.mode_history}
        if file.metadata.mode_history is not None
        else {},
    }
