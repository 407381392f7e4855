"""The archive of a whole session: its export (API, page, terminal), its import as an identical session,
and the archives refused whole."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from chat.formats.file_checks import MAX_IMPORT_BYTES
from chat.formats.session_file import MAX_IMPORT_ENTRIES
from chat.models import Checkpoint, CheckpointRevision, ContextEvent, Decision, Goal, Message, Session, Snapshot
from chat.selectors.context import session_budget
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.compression import compression_run
from chat.services.files import session_archive, session_archive_import, session_file
from chat.services.goals import (
    artifact_record,
    decision_record,
    goal_checkpoint_set,
    goal_create,
    goal_delete,
)
from chat.services.messages import message_create
from chat.services.sessions import session_create
from chat.services.snapshots import snapshot_create, snapshot_restore
from tests.factories import converse, event_types, prompt, small_session, until_due

pytestmark = pytest.mark.django_db
JSON = "application/json"


def _compress(session, gateway, fake_ollama, summary, start):
    """Converse until the trigger, then one real compression (the model's summary is ``summary``)."""
    index = until_due(session, start=start)
    fake_ollama.behaviour.canned_reply = summary
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "compressed", outcome
    return index


def _rich_session(user, gateway, fake_ollama):
    """Several real compressions (aged checkpoints among them), goals, a locked decision, an artifact, snapshots,
    a restore (excluded messages, a retired checkpoint) and a goal deleted after the last snapshot."""
    session = small_session(user)
    goal = goal_create(session=session, description="Ship secure logins", priority="high")
    goal_checkpoint_set(goal=goal, description="Hash the passwords", status="in-progress")
    decision_record(session=session, description="Argon2 only", locked=True, goal=goal)
    artifact_record(session=session, path="src/auth/hash.ts", action="created", goal=goal)
    index = _compress(session, gateway, fake_ollama, "First summary.", 0)
    early = snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason="after one")
    index = _compress(session, gateway, fake_ollama, "Second summary.", index)
    snapshot_restore(snapshot=early)  # the later messages leave the context, checkpoint 2 retires
    for summary in ("Third summary.", "Fourth summary.", "Fifth summary.", "Sixth summary.", "Seventh summary."):
        index = _compress(session, gateway, fake_ollama, summary, index)
    passing = goal_create(session=session, description="A passing goal")
    snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason="known good")
    goal_delete(goal=passing)  # the snapshot still holds it: a restore brings it back
    converse(session, 1, start=index)
    session.refresh_from_db()
    return session


def _ids_mapped(original, imported):
    """The imported session's checkpoint and snapshot ids as the original's, in creation order."""
    checkpoints = dict(
        zip(
            Checkpoint.objects.filter(session=imported).order_by("id").values_list("id", flat=True),
            Checkpoint.objects.filter(session=original).order_by("id").values_list("id", flat=True),
            strict=True,
        )
    )
    snapshots = dict(
        zip(
            Snapshot.objects.filter(session=imported).order_by("id").values_list("id", flat=True),
            Snapshot.objects.filter(session=original).order_by("id").values_list("id", flat=True),
            strict=True,
        )
    )
    return checkpoints, snapshots


def _events(session, checkpoints=None, snapshots=None, imported_at=None):
    """(type, payload, created_at) of each event, its checkpoint and snapshot ids mapped."""
    checkpoints, snapshots = checkpoints or {}, snapshots or {}
    imported_at = imported_at or timezone.now()
    rows = []
    for event in ContextEvent.objects.filter(session=session).order_by("id"):
        payload = dict(event.payload)
        if "checkpoint" in payload:
            payload["checkpoint"] = checkpoints.get(payload["checkpoint"], payload["checkpoint"])
        if "merged" in payload:
            payload["merged"] = [checkpoints.get(cp, cp) for cp in payload["merged"]]
        for key in ("snapshot", "undo_snapshot"):
            if payload.get(key) is not None:
                payload[key] = snapshots.get(payload[key], payload[key])
        # The undo snapshot of a restore made after the import names the new id in its text.
        named = re.fullmatch(r"Before restoring snapshot (\d+)", payload.get("reason", ""))
        if named and event.created_at > imported_at:
            payload["reason"] = f"Before restoring snapshot {snapshots.get(int(named[1]), int(named[1]))}"
        rows.append((event.type, payload, event.created_at))
    return rows


def _checkpoints(session, checkpoints=None):
    checkpoints = checkpoints or {}
    rows = []
    for cp in Checkpoint.objects.filter(session=session).order_by("id"):
        revisions = list(
            CheckpointRevision.objects.filter(checkpoint=cp)
            .order_by("id")
            .values_list(
                "level", "tokens", "summary", "reason", "retention", "missing_facts", "ledger_dropped", "created_at"
            )
        )
        rows.append(
            (
                cp.number,
                cp.level,
                cp.first_position,
                cp.last_position,
                cp.summary,
                cp.strategy,
                cp.current_tokens,
                cp.original_tokens,
                cp.facts,
                cp.ledger,
                cp.key_decisions,
                checkpoints.get(cp.merged_into_id, cp.merged_into_id),
                cp.retired,
                cp.created_at,
                cp.compressed_at,
                revisions,
            )
        )
    return rows


def _messages(session, checkpoints=None):
    checkpoints = checkpoints or {}
    return [
        (*row[:-1], checkpoints.get(row[-1], row[-1]))
        for row in Message.objects.filter(session=session)
        .order_by("position")
        .values_list(
            "position",
            "role",
            "content",
            "tokens",
            "tokens_exact",
            "created_at",
            "excluded_from_context",
            "context_version",
            "compressed_into_id",
        )
    ]


def _without_session_id(data, session):
    return json.dumps(data, ensure_ascii=False, sort_keys=True).replace(str(session.id), "<session>")


def test_an_archived_session_is_imported_identical(user, other_user, gateway, fake_ollama):
    original = _rich_session(user, gateway, fake_ollama)
    # Started by an outside client through the drop-in endpoint: the copy is marked the same.
    Session.objects.filter(pk=original.pk).update(client="ollama-python/0.6.3", client_digest="ab" * 32)
    original.refresh_from_db()
    assert original.compression_count == 6  # 1 at the early snapshot, which the restore brought back, + 5
    assert CheckpointRevision.objects.filter(checkpoint__session=original, reason="aged").exists()
    assert CheckpointRevision.objects.filter(checkpoint__session=original, reason="restored").exists()
    assert Checkpoint.objects.filter(session=original, retired=True).exists()
    assert Checkpoint.objects.filter(session=original, merged_into__isnull=False).count() == 2
    assert Message.objects.filter(session=original, excluded_from_context=True).exists()
    assert "snapshot-restored" in event_types(original)

    archive = session_archive(session=original)
    assert (archive["format"], archive["version"]) == ("ollm-site-archive", 1)
    # Under "session": exactly what the plain export gives.
    assert archive["session"] == session_file(session=original)
    # Read as a file from outside: JSON text.
    imported = session_archive_import(owner=other_user, data=json.loads(json.dumps(archive)))
    assert imported.owner == other_user
    assert imported.pk != original.pk

    # The next prompt, its budget and the session's own fields.
    assert prompt(imported) == prompt(original)
    assert session_budget(session=imported) == session_budget(session=original)
    fields = (
        "title",
        "model",
        "context_size",
        "max_tokens",
        "system_prompt",
        "system_prompt_tokens",
        "settings",
        "compression_count",
        "compressed_through",
        "context_version",
        "reliability_score",
        "model_parameter_size_b",
        "created_at",
        "last_activity",
        "client",
    )
    assert [getattr(imported, f) for f in fields] == [getattr(original, f) for f in fields]
    assert imported.client_digest == ""  # the client's next request continues the original, never the copy

    checkpoints, snapshots = _ids_mapped(original, imported)
    assert set(checkpoints) & set(checkpoints.values()) == set()  # new primary keys
    assert _messages(imported, checkpoints) == _messages(original)
    assert _checkpoints(imported, checkpoints) == _checkpoints(original)
    assert _events(imported, checkpoints, snapshots) == _events(original)
    goals = ("description", "priority", "status", "next_step", "created_at", "updated_at", "completed_at")
    assert list(Goal.objects.filter(session=imported).values_list(*goals)) == list(
        Goal.objects.filter(session=original).values_list(*goals)
    )
    assert list(
        Decision.objects.filter(session=imported).values_list("description", "locked", "goal__description")
    ) == [("Argon2 only", True, "Ship secure logins")]
    assert imported.artifacts.get().path == "src/auth/hash.ts"
    assert imported.goals.get(description="Ship secure logins").checkpoints.get().status == "in-progress"
    kept = ("kind", "reason", "token_count", "message_count", "checkpoint_count", "model", "tier", "created_at")
    assert list(Snapshot.objects.filter(session=imported).order_by("id").values_list(*kept)) == list(
        Snapshot.objects.filter(session=original).order_by("id").values_list(*kept)
    )

    # Another user's copy names the original's session file (sessionId and provider), as an import of that file
    # would: the archive of the imported session is the archive it came from, byte for byte, and so is the plain
    # export.
    assert (imported.source_session_id, imported.source_provider) == (str(original.id), "")
    assert json.dumps(session_archive(session=imported), ensure_ascii=False) == json.dumps(archive, ensure_ascii=False)
    assert json.dumps(session_file(session=imported)) == json.dumps(session_file(session=original))

    # Restoring the same snapshot in both gives the same prompt (and brings the deleted goal back in both).
    restored_at = timezone.now()
    for session in (original, imported):
        snapshot = Snapshot.objects.filter(session=session, reason="known good").get()
        snapshot_restore(snapshot=snapshot)
        session.refresh_from_db()
        assert session.goals.filter(description="A passing goal").exists()
    assert prompt(imported) == prompt(original)
    assert _messages(imported, checkpoints) == _messages(original)
    # Restoring the early one too: the retired checkpoint and the excluded messages come and go alike.
    for session in (original, imported):
        snapshot_restore(snapshot=Snapshot.objects.filter(session=session, reason="after one").get())
    assert prompt(imported) == prompt(original)
    _, snapshots = _ids_mapped(original, imported)
    assert [e[:2] for e in _events(imported, checkpoints, snapshots, imported_at=restored_at)] == [
        e[:2] for e in _events(original)
    ]


# --- the doors: the API, the page, the terminal ---------------------------------------------------


def _compressed_session(user):
    """A session with one checkpoint, a goal and a snapshot, made without a model."""
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192, title="Logins", system_prompt="Hi.")
    for index in range(3):
        message_create(session=session, role="user", content=f"Question {index}?")
        message_create(session=session, role="assistant", content=f"Answer {index}.")
    message_create(
        session=session,
        role="tool",
        content='{"rows": 2}',
        tool_call_id="call_1",
        tool_name="query",
        tool_args={"table": "users"},
        tool_result={"rows": 2},
    )
    message_create(session=session, role="assistant", content="Two rows.")
    first = session.messages.get(position=2)
    compression_commit(session=session, message_ids=[first.id], draft=CheckpointDraft(summary="The first answer."))
    goal = goal_create(session=session, description="Ship it")
    decision_record(session=session, description="Keep it small", locked=True, goal=goal)
    snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason="here")
    session.refresh_from_db()
    return session


def test_the_api_archives_for_the_owner_only_and_imports_it(api, bob_api, user):
    session = _compressed_session(user)
    assert bob_api.get(f"/api/sessions/{session.id}/archive").status_code == 404
    response = api.get(f"/api/sessions/{session.id}/archive")
    assert response.status_code == 200
    archive = response.json()
    assert archive == session_archive(session=session)
    assert [m["compressed_into"] for m in archive["messages"]] == [None, 1, None, None, None, None, None, None]
    assert [m["role"] for m in archive["messages"]][-2:] == ["tool", "assistant"]
    # Times to the microsecond, whatever precision the session file writes.
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", m["created_at"]) for m in archive["messages"])
    assert archive["snapshots"][0]["state"]["messages"]["states"][:2] == [[1, None, False], [2, 1, False]]

    imported = api.post("/api/sessions/import", archive, content_type=JSON)
    assert imported.status_code == 201, imported.content
    new = Session.objects.get(pk=imported.json()["id"])
    assert (new.title, new.compression_count) == ("Logins", 1)
    assert prompt(new) == prompt(session)
    fields = ("position", "role", "content", "tokens", "created_at", "tool_call_id", "tool_name", "tool_args")
    assert list(new.messages.values_list(*fields, "tool_result")) == list(
        session.messages.values_list(*fields, "tool_result")
    )
    # The owner holds the original: the copy is a session of its own id, its archive the same apart from that id.
    assert new.source_session_id == ""
    again = api.get(f"/api/sessions/{new.id}/archive").json()
    assert again["session"]["sessionId"] == str(new.id)
    assert _without_session_id(again, new) == _without_session_id(archive, session)
    # The archive's ids became the new session's own.
    checkpoint = Checkpoint.objects.get(session=new)
    snapshot = Snapshot.objects.get(session=new)
    assert snapshot.state["session"]["id"] == str(new.id)
    assert snapshot.state["checkpoints"][0]["id"] == checkpoint.id
    assert snapshot.state["messages"]["states"][1] == [new.messages.get(position=2).id, checkpoint.id, False]
    assert ContextEvent.objects.get(session=new, type="compressed").payload["checkpoint"] == checkpoint.id
    assert ContextEvent.objects.get(session=new, type="snapshot-created").payload["snapshot"] == snapshot.id
    # A title may be given; a context size may not (the checkpoints were made for the archive's).
    titled = api.post("/api/sessions/import?title=Copy", archive, content_type=JSON)
    assert titled.json()["title"] == "Copy"
    sized = api.post("/api/sessions/import?context_size=16384", archive, content_type=JSON)
    assert sized.status_code == 422
    assert "context size" in sized.json()["detail"]


def test_a_plain_session_file_is_still_imported_as_before(api, bob_api, user):
    session = _compressed_session(user)
    exported = api.get(f"/api/sessions/{session.id}/export").json()
    assert "format" not in exported
    body = bob_api.post("/api/sessions/import", exported, content_type=JSON).json()
    new = Session.objects.get(pk=body["id"])
    assert new.compression_count == 0
    assert not Checkpoint.objects.filter(session=new).exists()
    assert not Goal.objects.filter(session=new).exists()


def _broken(archive, path, value):
    data = json.loads(json.dumps(archive))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "detail"),
    [
        (("version",), 2, "archive.version: must be 1"),
        (("messages", 2, "compressed_into"), 9, "archive.messages[2].compressed_into: refers to checkpoint 9"),
        (("messages", 0, "tokens"), "12", "archive.messages[0].tokens: must be a whole number"),
        (("messages", 1, "role"), "user", 'archive.messages[1].role: is "user"; session.messages[1] is "assistant"'),
        (("checkpoints", 0, "level"), 7, "archive.checkpoints[0].level: must be one of 0, 1, 2, 3"),
        (("checkpoints", 0, "summary"), "a\x00b", "archive.checkpoints[0].summary: holds a NUL character"),
        (("goals", 0, "priority"), "urgent", "archive.goals[0].priority: must be one of"),
        (("decisions", 0, "goal"), 5, "archive.decisions[0].goal: refers to goal 5"),
        (("messages", 1, "version_of"), 99, "archive.messages[1].version_of: refers to message position 99"),
        (("snapshots", 0, "state", "checkpoints", 0, "id"), 4, "archive.snapshots[0].state.checkpoints[0].id"),
        (
            ("snapshots", 0, "state", "messages", "states", 0),
            [1, 1],
            "archive.snapshots[0].state.messages.states[0]: must be [position",
        ),
        (("events", 0, "payload", "checkpoint"), 3, "archive.events[0].payload.checkpoint: refers to checkpoint 3"),
        (("events", 0, "typo"), 1, "archive.events[0].typo: is not a field of the archive"),
        (("events", 0, "type"), "exploded", "archive.events[0].type: must be one of compressed, "),
        (("session", "messages", 0, "role"), "robot", "archive.session.messages[0].role: must be one of"),
        (("session", "metadata", "contextSize"), None, "archive.session.metadata.contextSize: is required"),
    ],
)
def test_a_bad_archive_is_422_naming_the_field_and_creates_nothing(api, user, path, value, detail):
    session = _compressed_session(user)
    archive = session_archive(session=session)
    before = (Session.objects.count(), Message.objects.count(), Checkpoint.objects.count(), Goal.objects.count())
    response = api.post("/api/sessions/import", _broken(archive, path, value), content_type=JSON)
    assert response.status_code == 422, response.content
    assert detail in response.json()["detail"]
    after = (Session.objects.count(), Message.objects.count(), Checkpoint.objects.count(), Goal.objects.count())
    assert after == before


def test_an_archive_that_fails_in_its_last_write_leaves_nothing(user, other_user, monkeypatch):
    """One transaction: goals, checkpoints, messages and snapshots already written go with the failure."""
    archive = session_archive(session=_compressed_session(user))

    def fail(*args, **kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(ContextEvent.objects, "bulk_create", fail)
    counts = (Session, Message, Checkpoint, CheckpointRevision, Goal, Decision, Snapshot)
    before = [model.objects.count() for model in counts]
    with pytest.raises(RuntimeError, match="disk is full"):
        session_archive_import(owner=other_user, data=archive)
    assert [model.objects.count() for model in counts] == before
    assert not Session.objects.filter(owner=other_user).exists()


def test_an_archive_over_the_entry_limit_is_413(api, user):
    session = _compressed_session(user)
    archive = session_archive(session=session)
    archive["events"] = archive["events"][:1] * (MAX_IMPORT_ENTRIES + 1)
    response = api.post("/api/sessions/import", archive, content_type=JSON)
    assert response.status_code == 413
    assert "events" in response.json()["detail"]


MARK = "@@hostile@@"


@pytest.mark.parametrize(
    ("path", "text", "detail"),
    [
        (("state", "reliability_score"), "NaN", "archive.state.reliability_score: "),
        (("state", "reliability_score"), "1e400", "archive.state.reliability_score: "),
        (("messages", 0, "tokens"), "7" * 5_000, "archive.messages[0].tokens: is a number of 5,000 digits"),
        (("events", 0, "payload"), '{"x": [Infinity]}', "archive.events[0].payload: holds a number that is not"),
        (
            ("messages", 0, "created_at"),
            '"0001-01-01T00:00:00+05:00"',
            "archive.messages[0].created_at: '0001-01-01T00:00:00+05:00' is out of range",
        ),
    ],
)
def test_numbers_and_times_the_database_cannot_store_are_422_at_their_place(api, user, path, text, detail):
    """Values Python's json reads (and never writes) but the database cannot store: 422 at their place."""
    archive = _broken(session_archive(session=_compressed_session(user)), path, MARK)
    hostile = json.dumps(archive).replace(f'"{MARK}"', text)
    before = Session.objects.count()
    response = api.post("/api/sessions/import", hostile, content_type=JSON)
    assert response.status_code == 422, response.content
    assert detail in response.json()["detail"]
    assert Session.objects.count() == before


def test_an_archive_over_the_size_limit_is_413(api, user):
    archive = session_archive(session=_compressed_session(user))
    archive["state"]["settings"] = {"padding": "x" * MAX_IMPORT_BYTES}
    response = api.post("/api/sessions/import", archive, content_type=JSON)
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]


def test_archive_imports_count_against_the_import_limit(api, user, settings):
    settings.OLLM_IMPORTS_PER_MINUTE = 1
    archive = session_archive(session=_compressed_session(user))
    assert api.post("/api/sessions/import", archive, content_type=JSON).status_code == 201
    assert api.post("/api/sessions/import", archive, content_type=JSON).status_code == 429


def test_the_chat_page_offers_the_archive_to_its_owner(owner_client, client, other_user, user):
    session = _compressed_session(user)
    url = f"/sessions/{session.id}/archive/"
    page = owner_client.get(f"/sessions/{session.id}/")
    assert url in page.content.decode()
    response = owner_client.get(url)
    assert response.status_code == 200
    assert f'filename="ollm-archive-{session.id}.json"' in response["Content-Disposition"]
    assert json.loads(response.content) == session_archive(session=session)
    # The delete confirmation offers it too, before everything goes.
    assert url in owner_client.get(f"/sessions/{session.id}/delete/").content.decode()
    client.force_login(other_user)
    assert client.get(url).status_code == 404


def test_the_command_writes_archives(user, tmp_path: Path):
    session = _compressed_session(user)
    call_command("export_sessions", "--archive", "--dir", str(tmp_path))
    written = json.loads((tmp_path / f"{session.id}.archive.json").read_text(encoding="utf-8"))
    assert written == session_archive(session=session)
    assert written["checkpoints"][0]["summary"] == "The first answer."


def test_the_openapi_document_names_the_archive_schema(client, user):
    client.force_login(user)
    document = client.get("/api/openapi.json").json()
    route = document["paths"]["/api/sessions/{session_id}/archive"]["get"]
    assert route["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SessionArchive"
    }
    schema = document["components"]["schemas"]["SessionArchive"]
    assert set(schema["properties"]) == {
        "format",
        "version",
        "session",
        "state",
        "messages",
        "checkpoints",
        "goals",
        "decisions",
        "artifacts",
        "snapshots",
        "events",
    }
    assert schema["properties"]["session"] == {"$ref": "#/components/schemas/SessionFile"}


def test_a_snapshot_taken_before_the_ledger_keeps_its_own_keys(api, user):
    """Older snapshots hold a checkpoint's range_label and no facts or ledger, which a restore reads by their
    absence: the archive and the import keep them as they are."""
    session = _compressed_session(user)
    taken = Snapshot.objects.get(session=session)
    state = json.loads(json.dumps(taken.state))
    for checkpoint in state["checkpoints"]:
        for key in ("facts", "ledger", "first_position", "last_position", "origin"):
            del checkpoint[key]
        checkpoint["range_label"] = "Message 2"
    old = Snapshot.objects.create(
        session=session,
        kind=Snapshot.Kind.MANUAL,
        reason="old",
        state=state,
        token_count=taken.token_count,
        message_count=taken.message_count,
        checkpoint_count=taken.checkpoint_count,
        model=taken.model,
        tier=taken.tier,
    )
    archive = session_archive(session=session)
    archived = archive["snapshots"][1]["state"]["checkpoints"][0]
    assert "facts" not in archived
    assert archived["range_label"] == "Message 2"
    body = api.post("/api/sessions/import", archive, content_type=JSON).json()
    new = Session.objects.get(pk=body["id"])
    copy = Snapshot.objects.get(session=new, reason="old")
    assert set(copy.state["checkpoints"][0]) == set(old.state["checkpoints"][0])
    for snapshot in (old, copy):
        snapshot_restore(snapshot=snapshot)
    assert prompt(new) == prompt(session)
    assert Checkpoint.objects.get(session=new).range_label == Checkpoint.objects.get(session=session).range_label


def test_an_archive_is_imported_without_asking_the_backend_about_its_model(
    use_gateway, gateway, fake_ollama, user, other_user
):
    """Its context size, num_ctx and parameter size are the archive's: a model Ollama's stand-in does not serve
    is imported all the same, and nothing is asked."""
    use_gateway(gateway)
    session = _compressed_session(user)  # llama3.2:3b: not among the stand-in's models
    archive = session_archive(session=session)
    asked = len(fake_ollama.behaviour.requests)
    new = session_archive_import(owner=other_user, data=archive)
    assert fake_ollama.behaviour.requests[asked:] == []
    assert (new.model, new.max_tokens, new.model_parameter_size_b) == (
        "llama3.2:3b",
        session.max_tokens,
        session.model_parameter_size_b,
    )


def test_a_session_from_the_cli_keeps_its_file_identity_in_another_users_copy(api, bob_api, other_user):
    cli = json.loads((Path(__file__).parent.parent / "data" / "ollm_cli_session.json").read_text(encoding="utf-8"))
    first = api.post("/api/sessions/import", cli, content_type=JSON)
    assert first.status_code == 201, first.content
    archive = api.get(f"/api/sessions/{first.json()['id']}/archive").json()
    assert (archive["session"]["sessionId"], archive["session"]["provider"]) == (cli["sessionId"], cli["provider"])

    copy = bob_api.post("/api/sessions/import", archive, content_type=JSON)
    assert copy.status_code == 201, copy.content
    copied = Session.objects.get(pk=copy.json()["id"])
    assert (copied.owner, copied.source_session_id, copied.source_provider) == (
        other_user,
        cli["sessionId"],
        cli["provider"],
    )
    assert bob_api.get(f"/api/sessions/{copied.id}/archive").json() == archive
    # The owner's own copy cannot share the sessionId of the session it holds: a copy under its own id.
    own = Session.objects.get(pk=api.post("/api/sessions/import", archive, content_type=JSON).json()["id"])
    assert (own.source_session_id, own.source_provider) == ("", cli["provider"])


def test_two_copies_racing_for_one_session_id_make_the_second_a_copy_of_its_own(user, other_user, monkeypatch):
    archive = session_archive(session=_compressed_session(user))
    first = session_archive_import(owner=other_user, data=archive)
    assert first.source_session_id == archive["session"]["sessionId"]
    # The second looked before the first was stored: the database refuses the same sessionId for the same owner.
    monkeypatch.setattr("chat.services.files.archive.session_for_file", lambda **kwargs: None)
    second = session_archive_import(owner=other_user, data=archive)
    assert second.pk != first.pk
    assert second.source_session_id == ""
    assert Session.objects.filter(owner=other_user).count() == 2
    assert Checkpoint.objects.filter(session=second).count() == 1
