"""The archive of a session (``chat.archive_file.SessionArchive``): written whole, and imported as an identical
session for the importing user, with new primary keys and every reference remapped.

The export (``chat.export``) and the import of a session file (``chat.imports``) are unchanged: the archive
holds the very file the export writes, and the import endpoint hands an archive (its ``format``) here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import pydantic
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from pydantic_core import ErrorDetails

from chat.archive_file import (
    ARCHIVE_FORMAT,
    ARCHIVE_VERSION,
    CHECKPOINT_KEYS,
    CHECKPOINT_LIST_KEYS,
    SNAPSHOT_KEYS,
    ArchiveArtifact,
    ArchiveCheckpoint,
    ArchiveDecision,
    ArchiveEvent,
    ArchiveGoal,
    ArchiveGoalCheckpoint,
    ArchiveMessage,
    ArchiveRevision,
    ArchiveSnapshot,
    ArchiveState,
    SessionArchive,
    SnapshotState,
)
from chat.export import session_file_build
from chat.imports import IMPORTED_TITLE, ImportTooLarge
from chat.models import Message
from chat.models import Session as ChatSession
from chat.selectors import ModelFacts, session_for_file
from chat.services import session_start
from chat.session_file import TOO_MANY_ENTRIES, LongNumber, SessionFile
from contextmgr.models import (
    Artifact,
    Checkpoint,
    CheckpointRevision,
    ContextEvent,
    Decision,
    Goal,
    GoalCheckpoint,
    Snapshot,
)

MAX_REPORTED_PROBLEMS = 3
Mapping = Callable[[int], int | None]


class ArchiveTooLarge(ImportTooLarge):
    """The archive holds more than MAX_IMPORT_ENTRIES entries in one of its lists (the import answers 413)."""


# --- the archive of a session ---------------------------------------------------------------------


class _Numbers:
    """Database ids as the archive's 1, 2, … in creation order; ids not among the rows (a snapshot's goal
    that was deleted since) get the next numbers, in the order they are first met."""

    def __init__(self, ids: Iterable[int]) -> None:
        self.known = {db_id: number for number, db_id in enumerate(ids, start=1)}

    def get(self, db_id: int) -> int | None:
        return self.known.get(db_id)

    def always(self, db_id: int) -> int:
        return self.known.setdefault(db_id, len(self.known) + 1)


def _remap_state(
    state: dict[str, Any],
    *,
    session_id: str,
    message: Callable[[int], int],
    checkpoint: Callable[[int], int],
    goal: Callable[[int], int],
    decision: Callable[[int], int],
    artifact: Callable[[int], int],
) -> dict[str, Any]:
    """A snapshot's state with every id changed by the mappings; the rest as it was."""

    def maybe(mapping: Callable[[int], int], value: int | None) -> int | None:
        return None if value is None else mapping(value)

    def goal_of(row: dict[str, Any]) -> dict[str, Any]:
        return {"goal": maybe(goal, row["goal"])} if "goal" in row else {}

    messages = state["messages"]
    return {
        **state,
        "session": {**state["session"], "id": session_id},
        "messages": {
            **messages,
            "states": [[message(m), maybe(checkpoint, cp), excluded] for m, cp, excluded in messages["states"]],
        },
        "checkpoints": [
            {**cp, "id": checkpoint(cp["id"]), "merged_into": maybe(checkpoint, cp["merged_into"])}
            for cp in state["checkpoints"]
        ],
        "goals": [{**g, "id": goal(g["id"])} for g in state["goals"]],
        "decisions": [{**d, "id": decision(d["id"]), **goal_of(d)} for d in state["decisions"]],
        "artifacts": [{**a, "id": artifact(a["id"]), **goal_of(a)} for a in state["artifacts"]],
    }


def _remap_payload(payload: dict[str, Any], *, checkpoint: Mapping, snapshot: Mapping) -> dict[str, Any]:
    """An event's payload with its checkpoint and snapshot ids changed; an id with no counterpart is null."""
    changed = dict(payload)
    for key in CHECKPOINT_KEYS:
        if isinstance(changed.get(key), int):
            changed[key] = checkpoint(changed[key])
    for key in CHECKPOINT_LIST_KEYS:
        if isinstance(changed.get(key), list):
            changed[key] = [checkpoint(value) if isinstance(value, int) else value for value in changed[key]]
    for key in SNAPSHOT_KEYS:
        if isinstance(changed.get(key), int):
            changed[key] = snapshot(changed[key])
    return changed


def session_archive_build(*, session: ChatSession) -> SessionArchive:
    """Everything of the session, its ids the archive's (see ``chat.archive_file``)."""
    file = session_file_build(session=session)
    session_id = file.session_id or str(session.id)
    messages = list(Message.objects.filter(session=session).order_by("position"))
    positions = {m.id: m.position for m in messages}
    checkpoints = list(Checkpoint.objects.filter(session=session).order_by("id").prefetch_related("revisions"))
    goals = list(Goal.objects.filter(session=session).order_by("id").prefetch_related("checkpoints"))
    decisions = list(Decision.objects.filter(session=session).order_by("id"))
    artifacts = list(Artifact.objects.filter(session=session).order_by("id"))
    snapshots = list(Snapshot.objects.filter(session=session).order_by("id"))
    events = list(ContextEvent.objects.filter(session=session).order_by("id"))
    cps = _Numbers(cp.id for cp in checkpoints)
    goal_numbers = _Numbers(g.id for g in goals)
    decision_numbers = _Numbers(d.id for d in decisions)
    artifact_numbers = _Numbers(a.id for a in artifacts)
    snapshot_numbers = _Numbers(s.id for s in snapshots)

    def local(numbers: _Numbers, db_id: int | None) -> int | None:
        return None if db_id is None else numbers.get(db_id)

    return SessionArchive(
        format=ARCHIVE_FORMAT,
        version=ARCHIVE_VERSION,
        session=file,
        state=ArchiveState(
            summary_model=session.summary_model,
            model_parameter_size_b=session.model_parameter_size_b,
            max_tokens=session.max_tokens,
            system_prompt_tokens=session.system_prompt_tokens,
            settings=session.settings,
            compression_count=session.compression_count,
            context_version=session.context_version,
            compressed_through=session.compressed_through,
            reliability_score=session.reliability_score,
            created_at=session.created_at,
            last_activity=session.last_activity,
            client=session.client,
        ),
        messages=[
            ArchiveMessage(
                position=m.position,
                role=cast(Any, m.role),
                tokens=m.tokens,
                tokens_exact=m.tokens_exact,
                done_reason=m.done_reason,
                context_version=m.context_version,
                compressed_into=local(cps, m.compressed_into_id),
                excluded_from_context=m.excluded_from_context,
                created_at=m.created_at,
            )
            for m in messages
        ],
        checkpoints=[
            ArchiveCheckpoint(
                id=cps.always(cp.id),
                number=cp.number,
                level=cp.level,
                first_position=cp.first_position,
                last_position=cp.last_position,
                origin=cp.origin,
                summary=cp.summary,
                strategy=cast(Any, cp.strategy),
                original_tokens=cp.original_tokens,
                current_tokens=cp.current_tokens,
                compression_count=cp.compression_count,
                key_decisions=cp.key_decisions,
                files_modified=cp.files_modified,
                next_steps=cp.next_steps,
                retention=cp.retention,
                facts=cp.facts,
                ledger=cp.ledger,
                merged_into=local(cps, cp.merged_into_id),
                retired=cp.retired,
                created_at=cp.created_at,
                compressed_at=cp.compressed_at,
                revisions=[
                    ArchiveRevision(
                        level=r.level,
                        tokens=r.tokens,
                        summary=r.summary,
                        reason=cast(Any, r.reason),
                        retention=r.retention,
                        facts_total=r.facts_total,
                        facts_kept=r.facts_kept,
                        missing_facts=r.missing_facts,
                        ledger_dropped=r.ledger_dropped,
                        created_at=r.created_at,
                    )
                    for r in sorted(cp.revisions.all(), key=lambda r: r.id)
                ],
            )
            for cp in checkpoints
        ],
        goals=[
            ArchiveGoal(
                id=goal_numbers.always(g.id),
                description=g.description,
                priority=cast(Any, g.priority),
                status=cast(Any, g.status),
                next_step=g.next_step,
                created_at=g.created_at,
                updated_at=g.updated_at,
                completed_at=g.completed_at,
                checkpoints=[
                    ArchiveGoalCheckpoint(
                        description=c.description,
                        status=cast(Any, c.status),
                        created_at=c.created_at,
                        updated_at=c.updated_at,
                    )
                    for c in sorted(g.checkpoints.all(), key=lambda c: c.id)
                ],
            )
            for g in goals
        ],
        decisions=[
            ArchiveDecision(
                id=decision_numbers.always(d.id),
                goal=local(goal_numbers, d.goal_id),
                description=d.description,
                locked=d.locked,
                created_at=d.created_at,
                updated_at=d.updated_at,
            )
            for d in decisions
        ],
        artifacts=[
            ArchiveArtifact(
                id=artifact_numbers.always(a.id),
                goal=local(goal_numbers, a.goal_id),
                path=a.path,
                action=cast(Any, a.action),
                created_at=a.created_at,
            )
            for a in artifacts
        ],
        snapshots=[
            ArchiveSnapshot(
                id=snapshot_numbers.always(s.id),
                kind=cast(Any, s.kind),
                reason=s.reason,
                state=SnapshotState.model_validate(
                    _remap_state(
                        s.state,
                        session_id=session_id,
                        message=positions.__getitem__,
                        checkpoint=cps.always,
                        goal=goal_numbers.always,
                        decision=decision_numbers.always,
                        artifact=artifact_numbers.always,
                    )
                ),
                token_count=s.token_count,
                message_count=s.message_count,
                checkpoint_count=s.checkpoint_count,
                model=s.model,
                tier=s.tier,
                created_at=s.created_at,
            )
            for s in snapshots
        ],
        events=[
            ArchiveEvent(
                type=e.type,
                payload=_remap_payload(e.payload, checkpoint=cps.get, snapshot=snapshot_numbers.get),
                created_at=e.created_at,
            )
            for e in events
        ],
    )


def session_archive(*, session: ChatSession) -> dict[str, Any]:
    """The archive as JSON data, as the page, the API and the terminal command write it."""
    return session_archive_build(session=session).to_json()


# --- the import of an archive ---------------------------------------------------------------------


def _where(loc: tuple[int | str, ...]) -> str:
    """``("messages", 0, "role")`` as ``archive.messages[0].role``."""
    return "archive" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def _problem(error: ErrorDetails) -> str:
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    if isinstance(value, LongNumber):
        return value.describe()
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field of the archive"
    if kind == "string_type":
        return "must be a string"
    if kind == "list_type":
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be an object"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be a whole number"
    if kind == "bool_type":
        return "must be true or false"
    if kind == "float_type":
        return "must be a number"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", '"')
        return f"must be one of {expected}" if " or " in expected else f"must be {expected}"
    if kind == "string_too_long" and isinstance(value, str):
        return f"is {len(value):,} characters long; the limit is {ctx['max_length']:,}"
    return error["msg"]


def session_archive_parse(data: Any) -> SessionArchive:
    """The archive checked completely; ValidationError names each problem's place
    (``archive.checkpoints[2].level``), ArchiveTooLarge one with too many entries."""
    try:
        return SessionArchive.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        too_many = next((e for e in errors if e["type"] == TOO_MANY_ENTRIES), None)
        if too_many is not None:
            raise ArchiveTooLarge(too_many["msg"]) from None
        problems = [f"{_where(e['loc'])}: {_problem(e)}" for e in errors[:MAX_REPORTED_PROBLEMS]]
        if len(errors) > MAX_REPORTED_PROBLEMS:
            problems.append(f"and {len(errors) - MAX_REPORTED_PROBLEMS:,} more problems")
        raise ValidationError("; ".join(problems)) from None


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
    entries = _history(archive)
    positions = {m.position for m in archive.messages}
    checkpoints = _unique(archive.checkpoints, "checkpoints")
    goals = _unique(archive.goals, "goals")
    _unique(archive.decisions, "decisions")
    _unique(archive.artifacts, "artifacts")
    snapshots = _unique(archive.snapshots, "snapshots")
    for i, m in enumerate(archive.messages):
        _known(m.compressed_into, checkpoints, f"messages[{i}].compressed_into", "checkpoint")
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


def _created(rows: list[Any], times: Iterable[dict[str, Any]]) -> None:
    """Give created rows their archived times (``auto_now`` fields too: bulk_update does not touch them)."""
    fields: set[str] = set()
    for row, values in zip(rows, times, strict=True):
        for name, value in values.items():
            setattr(row, name, value)
            fields.add(name)
    if rows and fields:
        type(rows[0]).objects.bulk_update(rows, sorted(fields))


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

    goals = Goal.objects.bulk_create(
        Goal(
            session=session,
            description=g.description,
            priority=g.priority,
            status=g.status,
            next_step=g.next_step,
            completed_at=g.completed_at,
        )
        for g in archive.goals
    )
    _created(goals, ({"created_at": g.created_at, "updated_at": g.updated_at} for g in archive.goals))
    goal_ids = {g.id: row.pk for g, row in zip(archive.goals, goals, strict=True)}
    pairs = [(goal_ids[g.id], c) for g in archive.goals for c in g.checkpoints]
    goal_checkpoints = GoalCheckpoint.objects.bulk_create(
        GoalCheckpoint(goal_id=goal_id, description=c.description, status=c.status) for goal_id, c in pairs
    )
    _created(goal_checkpoints, ({"created_at": c.created_at, "updated_at": c.updated_at} for _, c in pairs))
    decisions = Decision.objects.bulk_create(
        Decision(
            session=session,
            goal_id=goal_ids[d.goal] if d.goal else None,
            description=d.description,
            locked=d.locked,
        )
        for d in archive.decisions
    )
    _created(decisions, ({"created_at": d.created_at, "updated_at": d.updated_at} for d in archive.decisions))
    decision_ids = {d.id: row.pk for d, row in zip(archive.decisions, decisions, strict=True)}
    artifacts = Artifact.objects.bulk_create(
        Artifact(session=session, goal_id=goal_ids[a.goal] if a.goal else None, path=a.path, action=a.action)
        for a in archive.artifacts
    )
    _created(artifacts, ({"created_at": a.created_at} for a in archive.artifacts))
    artifact_ids = {a.id: row.pk for a, row in zip(archive.artifacts, artifacts, strict=True)}

    checkpoints = Checkpoint.objects.bulk_create(
        Checkpoint(
            session=session,
            number=cp.number,
            level=cp.level,
            first_position=cp.first_position,
            last_position=cp.last_position,
            origin=cp.origin,
            summary=cp.summary,
            strategy=cp.strategy,
            original_tokens=cp.original_tokens,
            current_tokens=cp.current_tokens,
            compression_count=cp.compression_count,
            key_decisions=cp.key_decisions,
            files_modified=cp.files_modified,
            next_steps=cp.next_steps,
            retention=cp.retention,
            facts=cp.facts,
            ledger=cp.ledger,
            retired=cp.retired,
            compressed_at=cp.compressed_at,
        )
        for cp in archive.checkpoints
    )
    checkpoint_ids = {cp.id: row.pk for cp, row in zip(archive.checkpoints, checkpoints, strict=True)}
    _created(
        checkpoints,
        (
            {
                "created_at": cp.created_at,
                "merged_into_id": checkpoint_ids[cp.merged_into] if cp.merged_into else None,
            }
            for cp in archive.checkpoints
        ),
    )
    pairs_r = [(checkpoint_ids[cp.id], r) for cp in archive.checkpoints for r in cp.revisions]
    revisions = CheckpointRevision.objects.bulk_create(
        CheckpointRevision(
            checkpoint_id=checkpoint_id,
            level=r.level,
            tokens=r.tokens,
            summary=r.summary,
            reason=r.reason,
            retention=r.retention,
            facts_total=r.facts_total,
            facts_kept=r.facts_kept,
            missing_facts=r.missing_facts,
            ledger_dropped=r.ledger_dropped,
        )
        for checkpoint_id, r in pairs_r
    )
    _created(revisions, ({"created_at": r.created_at} for _, r in pairs_r))

    messages = Message.objects.bulk_create(
        (
            Message(
                session=session,
                position=e.state.position,
                role=e.state.role,
                content=e.content,
                tokens=e.state.tokens,
                tokens_exact=e.state.tokens_exact,
                created_at=e.state.created_at,
                compressed_into_id=checkpoint_ids[e.state.compressed_into] if e.state.compressed_into else None,
                done_reason=e.state.done_reason,
                context_version=e.state.context_version,
                excluded_from_context=e.state.excluded_from_context,
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
            kind=s.kind,
            reason=s.reason,
            state=_remap_state(
                s.state.model_dump(mode="json", exclude_unset=True),
                session_id=str(session.id),
                message=message_ids.__getitem__,
                checkpoint=checkpoint_ids.__getitem__,
                goal=reserving(goal_ids, Goal, description=""),
                decision=reserving(decision_ids, Decision, description=""),
                artifact=reserving(artifact_ids, Artifact, path="", action=Artifact.Action.CREATED),
            ),
            token_count=s.token_count,
            message_count=s.message_count,
            checkpoint_count=s.checkpoint_count,
            model=s.model,
            tier=s.tier,
        )
        # Its own creation time, written in the transaction that creates it (Snapshot.objects refuses any
        # update: a stored snapshot never changes).
        models.QuerySet(model=Snapshot).filter(pk=snapshot.pk).update(created_at=s.created_at)
        snapshot_ids[s.id] = snapshot.pk

    events = ContextEvent.objects.bulk_create(
        ContextEvent(
            session=session,
            type=e.type,
            payload=_remap_payload(e.payload, checkpoint=checkpoint_ids.get, snapshot=snapshot_ids.get),
        )
        for e in archive.events
    )
    _created(events, ({"created_at": e.created_at} for e in archive.events))

    ChatSession.objects.filter(pk=session.pk).update(
        max_tokens=state.max_tokens,
        system_prompt_tokens=state.system_prompt_tokens,
        model_parameter_size_b=state.model_parameter_size_b,
        compression_count=state.compression_count,
        context_version=state.context_version,
        compressed_through=state.compressed_through,
        reliability_score=state.reliability_score,
        created_at=state.created_at,
        last_activity=state.last_activity,
        client=state.client,
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
