"""OLLM session files over the API: export, import, round trips and hostile files."""

from __future__ import annotations

import json
import math
import os
import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from uuid import uuid4

import jsonschema_rs
import pytest
import redis
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat.formats.file_checks import MAX_IMPORT_BYTES, MAX_IMPORT_DEPTH
from chat.formats.session_file import MAX_IMPORT_ENTRIES, SessionFile
from chat.models import Message, Session
from chat.selectors.context import session_budget
from chat.selectors.sessions import session_for_file
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.files import import_throttle, session_file_import
from chat.services.messages import message_create
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME, TOKENIZE_BATCH
from tests.factories import CLI_FILE, GREEDY_REPLIES, cli_file, cli_file_history

pytestmark = pytest.mark.django_db
JSON = "application/json"


def _history(session):
    message_create(session=session, role="user", content="Read the file, please")
    reply = message_create(session=session, role="assistant", content="Reading <file> now… 🧪")
    message_create(
        session=session,
        role="tool",
        content="contents",
        tool_call_id="call_1",
        tool_name="read_file",
        tool_args={"path": "file.ts"},
    )
    message_create(
        session=session,
        role="tool",
        content='{"rows": 2}',
        tool_call_id="call_2",
        tool_name="query",
        tool_args={},
        tool_result={"rows": 2},
    )
    message_create(session=session, role="assistant", content="Done: two rows.")
    return reply


def _millis(moment):
    """A stored time as a session file carries it: cut to the millisecond."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _without_id(data):
    return {key: value for key, value in data.items() if key != "sessionId"}


def test_export_import_export_is_identical_apart_from_the_id(api, user):
    """Imported by its owner as a copy (its own export's sessionId is the session's already): a new session under
    its own id."""
    session = session_create(
        owner=user, model="llama3.2:3b", context_size=8192, title="Files", system_prompt="Be exact."
    )
    _history(session)
    first = api.get(f"/api/sessions/{session.id}/export")
    assert first.status_code == 200
    exported = first.json()
    assert [call["result"] for call in exported["toolCalls"]] == [
        {"llmContent": "contents"},
        {"llmContent": '{"rows": 2}', "data": {"rows": 2}},
    ]
    # The export is the schema's own output: read back and written again, nothing changes.
    assert SessionFile.model_validate(exported).to_json() == exported
    imported = api.post("/api/sessions/import?on_existing=copy", exported, content_type=JSON)
    assert imported.status_code == 201
    new = Session.objects.get(pk=imported.json()["id"])
    assert new.id != session.id
    assert (new.owner, new.title, new.context_size, new.system_prompt) == (user, "Files", 8192, "Be exact.")
    again = api.get(f"/api/sessions/{new.id}/export").json()
    assert again["sessionId"] == str(new.id) != exported["sessionId"]
    assert _without_id(again) == _without_id(exported)
    # The tool results sit between the messages again, as they were, with their times.
    fields = ("role", "content", "created_at", "tool_call_id", "tool_name", "tool_args", "tool_result")
    # Times as the file has them: to the millisecond.
    assert list(new.messages.values_list(*fields)) == [
        (*values[:2], _millis(values[2]), *values[3:]) for values in session.messages.values_list(*fields)
    ]
    assert list(new.messages.values_list("role", flat=True)) == ["user", "assistant", "tool", "tool", "assistant"]
    assert new.messages.get(tool_call_id="call_2").tool_result == {"rows": 2}
    assert new.model == session.model
    assert (new.created_at, new.last_activity) == (_millis(session.created_at), _millis(session.last_activity))


def test_import_as_a_multipart_file_with_overrides(api, user):
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192)
    _history(session)
    data = api.get(f"/api/sessions/{session.id}/export").content
    upload = SimpleUploadedFile("session.json", data, content_type=JSON)
    response = api.post(
        "/api/sessions/import?context_size=16384&title=From%20a%20file&on_existing=copy", {"file": upload}
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["title"], body["context_size"], body["max_tokens"]) == ("From a file", 16384, 13600)
    assert Message.objects.filter(session_id=body["id"]).count() == 5


def test_an_imported_compressed_session_starts_uncompressed(api, user):
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192)
    reply = _history(session)
    compression_commit(session=session, message_ids=[reply.id], draft=CheckpointDraft(summary="Read it."))
    exported = api.get(f"/api/sessions/{session.id}/export").json()
    assert exported["metadata"]["compressionCount"] == 1
    body = api.post("/api/sessions/import?on_existing=copy", exported, content_type=JSON).json()
    again = api.get(f"/api/sessions/{body['id']}/export").json()
    assert again["messages"] == exported["messages"]
    assert again["toolCalls"] == exported["toolCalls"]
    assert again["metadata"]["compressionCount"] == 0
    # The whole history is active again: every message counts, and no checkpoint.
    assert again["metadata"]["tokenCount"] == sum(session.messages.values_list("tokens", flat=True))
    history = api.get(f"/api/sessions/{body['id']}/messages").json()
    assert history["count"] == 5
    assert all(m["in_active_context"] for m in history["items"])


def test_an_import_over_the_trigger_waits_for_its_first_turn_to_compress(api, monkeypatch, settings):
    """An import starts no model work: the session compresses when its first turn checks the budget,
    before the reply (or when the user asks)."""
    scheduled = []

    def schedule(**kwargs):
        messages = Message.objects.filter(session_id=kwargs["session_id"])
        scheduled.append((kwargs["session_id"], messages.count()))

    monkeypatch.setattr("chat.services.compression.schedule.compression_schedule", schedule)
    # Over the trigger of the embedded model's 2K context, made 1,000 tokens so the reply is quick, with
    # room for the prompt left.
    settings.OLLM_MODEL_CONTEXT_OVERRIDES = {MODEL_NAME: {2048: 1000}}
    note = "The schema has users, orders and invoices; each order belongs to one user. "
    big = {
        "model": MODEL_NAME,
        "messages": [{"role": "assistant", "parts": [{"type": "text", "text": note * 6}]} for _ in range(8)],
        "metadata": {"contextSize": 2048},
    }
    body = api.post("/api/sessions/import", big, content_type=JSON).json()
    session = Session.objects.get(pk=body["id"])
    budget = session_budget(session=session)
    assert budget.max_tokens == 1000
    assert budget.trigger_at <= budget.active_tokens < budget.max_tokens - 100
    assert scheduled == []
    with override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=4):
        turn = api.post(f"/api/sessions/{session.id}/messages", {"content": "Which tables?"}, content_type=JSON)
    assert turn.status_code == 200, turn.content
    # Scheduled before the reply was stored (8 imported messages and the question): the budget is checked
    # before the model answers.
    assert scheduled[0] == (session.pk, 9)


def _valid_file(**changes):
    """A good file; each has a sessionId of its own (a second import of one is refused)."""
    data = {
        "sessionId": str(uuid4()),
        "startTime": "2026-01-26T10:00:00Z",
        "lastActivity": "2026-01-26T11:30:00Z",
        "model": "llama3.2:3b",
        "provider": "ollama",
        "messages": [
            {"role": "user", "parts": [{"type": "text", "text": "hi"}], "timestamp": "2026-01-26T10:00:00Z"},
        ],
        "toolCalls": [],
        "metadata": {"tokenCount": 1, "compressionCount": 0},
    }
    data.update(changes)
    return data


def test_imported_messages_are_searched_by_the_dates_in_the_file(api, client, user):
    """The search index dates an imported message as the file does, not as the day of the import."""
    old = _valid_file(
        startTime="2020-03-14T09:00:00Z",
        lastActivity="2020-03-14T09:05:00Z",
        messages=[
            {"role": role, "parts": [{"type": "text", "text": text}], "timestamp": f"2020-03-14T09:0{minute}:00Z"}
            for role, text, minute in (("user", "where is the okapi", 0), ("assistant", "the okapi sleeps", 5))
        ],
    )
    body = api.post("/api/sessions/import", old, content_type=JSON).json()
    ids = list(Message.objects.filter(session_id=body["id"]).order_by("position").values_list("id", flat=True))

    def found(**dates):
        response = api.get("/api/search", {"q": "okapi", **dates})
        assert response.status_code == 200
        return response.json()

    in_2020 = found(since="2020-03-01", until="2020-03-31")
    assert sorted(hit["id"] for hit in in_2020["results"]) == sorted(ids)
    dated = sorted(hit["created_at"][:19] for hit in in_2020["results"])
    assert dated == ["2020-03-14T09:00:00", "2020-03-14T09:05:00"]
    assert found(since="2020-03-14", until="2020-03-14")["total"] == 2
    assert found(since="2020-03-15")["total"] == 0  # not "new" because it was imported today
    assert found(until="2020-03-13")["total"] == 0
    # The search page filters the same way.
    client.force_login(user)
    page = client.get("/search/", {"q": "okapi", "since": "2020-03-01", "until": "2020-03-31"}).content.decode()
    assert page.count("okapi</mark>") == 2
    recent = client.get("/search/", {"q": "okapi", "since": "2021-01-01"}).content.decode()
    assert "okapi</mark>" not in recent


def _deep(levels):
    value: object = "bottom"
    for _ in range(levels):
        value = {"x": value}
    return value


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ([1, 2], "file: must be an object"),
        (_valid_file(model=None), "file.model: must be a string"),
        ({"messages": []}, "file.model: is required"),
        (_valid_file(model=7), "file.model: must be a string"),
        (_valid_file(messages="all of them"), "file.messages: must be a list"),
        (_valid_file(messages=[{"role": "robot", "parts": []}]), "file.messages[0].role: must be one of"),
        (_valid_file(messages=[{"role": "user", "parts": [{"type": "image"}]}]), 'parts[0].type: must be "text"'),
        (
            _valid_file(messages=[{"role": "user", "parts": [{"type": "text"}]}]),
            "file.messages[0].parts[0].text: is req",
        ),
        (_valid_file(messages=[{"role": "user", "parts": [{"type": "text", "text": 5}]}]), "text: must be a string"),
        (
            _valid_file(messages=[{"role": "user", "parts": [{"type": "text", "text": " "}]}]),
            "[0]: The message is empty",
        ),
        (
            _valid_file(messages=[{"role": "user", "parts": [{"type": "text", "text": "x"}], "timestamp": 5}]),
            "must be a",
        ),
        (_valid_file(startTime="yesterday"), "file.startTime: 'yesterday' is not an ISO 8601 time"),
        (
            _valid_file(lastActivity="0001-01-01T00:00:00+01:00"),
            "file.lastActivity: '0001-01-01T00:00:00+01:00' is out",
        ),
        (_valid_file(toolCalls=[{"id": "c", "name": "n", "args": [], "result": {"llmContent": "x"}}]), "args: must"),
        (_valid_file(toolCalls=[{"id": "c", "name": "n", "args": {}, "result": {}}]), "llmContent: is required"),
        (_valid_file(toolCalls=[{"id": "c", "name": "n", "result": {"llmContent": None}}]), "llmContent: is required"),
        (_valid_file(toolCalls=[{"id": "c", "name": "n", "result": "done"}]), "[0].result: must be an object"),
        (_valid_file(toolCalls=[{"id": 1, "name": "n", "result": {"llmContent": "x"}}]), "[0].id: must be a string"),
        (_valid_file(metadata={"contextSize": "16K"}), "contextSize: must be a whole number"),
        (_valid_file(metadata={"contextSize": "16384"}), "contextSize: must be a whole number"),
        (_valid_file(metadata={"contextSize": True}), "contextSize: must be a whole number"),
        (_valid_file(metadata=[]), "file.metadata: must be an object"),
        (_valid_file(metadata={"contextSize": 1000}), "context size 1000 is not offered"),
        (_valid_file(metadata={"title": "t" * 201}), "file.metadata.title: is 201 characters long"),
        (_valid_file(toolCalls=[{"id": "c", "name": "n", "result": {"llmContent": _deep(30)}}]), "nested more than"),
        (_valid_file(toolCalls=[{"id": "c", "name": "n", "result": {"llmContent": "a\x00b"}}]), "NUL character"),
        (
            _valid_file(toolCalls=[{"id": "c", "name": "n", "args": {"p": ["\ud800"]}, "result": {"llmContent": ""}}]),
            "(at .p[0])",
        ),
        (_valid_file(metadata={"systemPrompt": "a\x00b"}), "file.metadata.systemPrompt: holds a NUL character"),
        (_valid_file(metadata={"contextSize": 0}), "file.metadata.contextSize: must be greater than 0"),
        (_valid_file(metadata={"contextSize": -5}), "file.metadata.contextSize: must be greater than 0"),
        # NaN and Infinity: Python's json reads them, the database's JSON refuses them.
        (
            _valid_file(toolCalls=[{"id": "c", "name": "n", "args": {"x": math.nan}, "result": {"llmContent": ""}}]),
            "file.toolCalls[0].args: holds NaN, which is not a JSON number (at .x)",
        ),
        (
            _valid_file(toolCalls=[{"id": "c", "name": "n", "result": {"llmContent": {"rows": [math.inf]}}}]),
            "file.toolCalls[0].result.llmContent: holds Infinity, which is not a JSON number (at .rows[0])",
        ),
        (
            _valid_file(toolCalls=[{"id": "c", "name": "n", "result": {"llmContent": "", "data": -math.inf}}]),
            "file.toolCalls[0].result.data: holds -Infinity, which is not a JSON number",
        ),
        (_valid_file(metadata={"contextSize": math.nan}), "file.metadata.contextSize: must be a whole number"),
        # Moments Python cannot convert to UTC.
        (_valid_file(startTime="0001-01-01T00:00:00+05:00"), "file.startTime: '0001-01-01T00:00:00+05:00' is out"),
        (
            _valid_file(lastActivity="9999-12-31T23:59:59-05:00"),
            "file.lastActivity: '9999-12-31T23:59:59-05:00' is out of range",
        ),
        (
            _valid_file(
                messages=[
                    {"role": "user", "parts": [{"type": "text", "text": "x"}], "timestamp": "9999-12-31T23:59:59-05:00"}
                ]
            ),
            "file.messages[0].timestamp: '9999-12-31T23:59:59-05:00' is out of range",
        ),
        (
            _valid_file(
                toolCalls=[
                    {"id": "c", "name": "n", "result": {"llmContent": ""}, "timestamp": "0001-01-01T00:00:00+00:01"}
                ]
            ),
            "file.toolCalls[0].timestamp: '0001-01-01T00:00:00+00:01' is out of range",
        ),
    ],
)
def test_malformed_files_are_refused_with_422_and_create_nothing(api, data, detail):
    response = api.post("/api/sessions/import", data, content_type=JSON)
    assert response.status_code == 422
    assert detail in response.json()["detail"]
    assert not Session.objects.exists()
    assert not Message.objects.exists()


HUGE = "7" * 5_000  # Python reads at most 4,300 digits: json.loads alone raises a ValueError naming no place


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (
            json.dumps(_valid_file(metadata={"contextSize": 0})).replace('"contextSize": 0', f'"contextSize": {HUGE}'),
            "file.metadata.contextSize: is a number of 5,000 digits, too long to read",
        ),
        (
            json.dumps(_valid_file(metadata={"tokenCount": 0})).replace('"tokenCount": 0', f'"tokenCount": -{HUGE}'),
            "file.metadata.tokenCount: is a number of 5,000 digits",
        ),
        (
            json.dumps(
                _valid_file(toolCalls=[{"id": "c", "name": "n", "args": {"n": [0]}, "result": {"llmContent": ""}}])
            ).replace("[0]", f"[{HUGE}]"),
            "file.toolCalls[0].args: is a number of 5,000 digits, too long to read (at .n[0])",
        ),
        (json.dumps(_valid_file(model="m")).replace('"m"', HUGE), "file.model: is a number of 5,000 digits"),
        (
            json.dumps(
                _valid_file(toolCalls=[{"id": "c", "name": "n", "result": {"llmContent": "", "data": 0}}])
            ).replace('"data": 0', '"data": 1e400'),
            "file.toolCalls[0].result.data: holds Infinity, which is not a JSON number",
        ),
    ],
)
def test_numbers_python_cannot_read_or_the_database_cannot_store_are_422_at_their_place(api, text, detail):
    as_body = api.post("/api/sessions/import", text, content_type=JSON)
    as_file = api.post("/api/sessions/import", {"file": SimpleUploadedFile("f.json", text.encode(), content_type=JSON)})
    for response in (as_body, as_file):
        assert response.status_code == 422
        assert response.json()["detail"].startswith(detail)
    assert not Session.objects.exists()


@pytest.mark.parametrize("value", ["0", "-5", "true", "16K"])
def test_a_context_size_override_must_be_a_positive_whole_number(api, value):
    """0 is not "not set" (the file's size or the default would be used), and true is not 1."""
    response = api.post(f"/api/sessions/import?context_size={value}", _valid_file(), content_type=JSON)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "context_size"]
    assert not Session.objects.exists()


def test_a_context_size_override_replaces_the_files(api):
    data = _valid_file(metadata={"contextSize": 8192})
    assert api.post("/api/sessions/import", data, content_type=JSON).json()["context_size"] == 8192
    other = _valid_file(metadata={"contextSize": 8192})
    assert api.post("/api/sessions/import?context_size=4096", other, content_type=JSON).json()["context_size"] == 4096


def test_imports_are_limited_per_user_and_minute(api, bob_api, settings, monkeypatch):
    """A 429 with a clear message once a user has started OLLM_IMPORTS_PER_MINUTE imports (files that fail
    count too: reading them is the work); other users are not held back."""
    settings.OLLM_IMPORTS_PER_MINUTE = 3
    clock = [1_000_000.0]  # 20 seconds before a minute ends
    monkeypatch.setattr("chat.services.files.imports.time", SimpleNamespace(time=lambda: clock[0]))
    assert api.post("/api/sessions/import", b"{not json", content_type=JSON).status_code == 422
    for _ in range(2):
        assert api.post("/api/sessions/import", _valid_file(), content_type=JSON).status_code == 201
    refused = api.post("/api/sessions/import", _valid_file(), content_type=JSON)
    assert refused.status_code == 429
    assert refused.json()["detail"] == "Too many imports: at most 3 a minute. Try again in 20 seconds."
    assert Session.objects.count() == 2
    assert bob_api.post("/api/sessions/import", _valid_file(), content_type=JSON).status_code == 201
    # The next minute counts afresh.
    clock[0] += 20
    assert api.post("/api/sessions/import", _valid_file(), content_type=JSON).status_code == 201


def test_an_import_counts_its_messages_without_a_request_each_and_stores_them_in_order(api, user, fake_ollama):
    """Counting one request a message took an import of 5,000 minutes: the app counts them with the model's
    vocabulary (at most the probe of its first count goes to the server), exactly."""
    entries = TOKENIZE_BATCH + 40
    texts = [f"Message {n}: the orders table gets index {n}." for n in range(entries)]
    data = _valid_file(
        model=MODEL_NAME,
        messages=[
            {
                "role": "user" if n % 2 == 0 else "assistant",
                "parts": [{"type": "text", "text": text}],
                "timestamp": f"2026-01-26T10:{n // 60 % 60:02d}:{n % 60:02d}Z",
            }
            for n, text in enumerate(texts)
        ],
    )
    fake_ollama.behaviour.requests.clear()
    response = api.post("/api/sessions/import", data, content_type=JSON)
    assert response.status_code == 201, response.content
    counted = [r for r in fake_ollama.behaviour.requests if r["path"] == "/api/tokenize"]
    assert all("texts" not in r for r in counted)
    assert len(counted) <= 2, "only the probe and the template's overhead may be asked"
    stored = list(Message.objects.filter(session_id=response.json()["id"]).order_by("position"))
    assert [m.position for m in stored] == list(range(1, entries + 1))
    assert [m.content for m in stored] == texts
    assert all(m.tokens_exact for m in stored)
    assert stored[-1].created_at == datetime(2026, 1, 26, 10, 8, 59, tzinfo=UTC)
    assert len({m.context_version for m in stored}) == 1, "one context version for the whole import"


@pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="needs Redis: runs in the services pass of `make test` (REDIS_URL set)"
)
def test_with_redis_the_import_counter_is_shared_by_every_web_process(user):
    """With REDIS_URL the cache is Redis: the count is where any other process reads it."""
    assert import_throttle(owner=user) is None
    assert import_throttle(owner=user) is None
    client = redis.Redis.from_url(django_settings.CACHES["default"]["LOCATION"])
    (key,) = client.keys(f"ollm:*:ollm:imports:{user.pk}:*")
    assert client.get(key) == b"2"


def test_a_file_that_fails_late_creates_nothing(api, user):
    """The first messages are valid; the last one fails only when it is stored."""
    data = _valid_file(
        messages=[{"role": "user", "parts": [{"type": "text", "text": f"m{n}"}]} for n in range(50)]
        + [{"role": "user", "parts": [{"type": "text", "text": "   "}]}]
    )
    with pytest.raises(ValidationError, match=re.escape("file.messages[50]: The message is empty")):
        session_file_import(owner=user, data=data)
    assert not Session.objects.exists()
    assert not Message.objects.exists()


def test_broken_and_hostile_bodies_are_refused(api):
    not_json = api.post("/api/sessions/import", b"{not json", content_type=JSON)
    assert not_json.status_code == 422
    assert "not JSON" in not_json.json()["detail"]
    bomb = api.post("/api/sessions/import", b"[" * 100_000 + b"]" * 100_000, content_type=JSON)
    assert bomb.status_code == 422
    assert "nested more than" in bomb.json()["detail"]
    ten_mb = json.dumps(_valid_file(model="x" * (10 * 1024 * 1024)))
    huge = api.post("/api/sessions/import", ten_mb, content_type=JSON)
    assert huge.status_code == 413
    assert f"the limit is {MAX_IMPORT_BYTES:,}" in huge.json()["detail"]
    upload = SimpleUploadedFile("big.json", ten_mb.encode(), content_type=JSON)
    assert api.post("/api/sessions/import", {"file": upload}).status_code == 413
    many = _valid_file(messages=[{"role": "user", "parts": []}] * (MAX_IMPORT_ENTRIES + 1))
    too_many = api.post("/api/sessions/import", many, content_type=JSON)
    assert too_many.status_code == 413
    assert "5,001 messages and tool calls" in too_many.json()["detail"]
    assert not Session.objects.exists()


def test_a_structured_llm_content_from_another_tool_is_read_as_json(api):
    call = {"id": "c", "name": "query", "result": {"llmContent": {"rows": [1, 2]}}, "timestamp": "2026-01-26T10:00:01Z"}
    body = api.post("/api/sessions/import", _valid_file(toolCalls=[call]), content_type=JSON).json()
    tool = Message.objects.get(session_id=body["id"], role="tool")
    assert (tool.content, tool.tool_result, tool.tool_args) == ('{"rows": [1, 2]}', {"rows": [1, 2]}, {})
    assert list(Message.objects.filter(session_id=body["id"]).values_list("role", flat=True)) == ["user", "tool"]


def test_an_import_needs_a_file_field_or_a_json_body(api):
    no_file = api.post("/api/sessions/import", {"other": "field"})
    assert no_file.status_code == 415
    assert '"file"' in no_file.json()["detail"]
    text = api.post("/api/sessions/import", "model: x", content_type="text/plain")
    assert text.status_code == 415
    assert not Session.objects.exists()


def test_nesting_up_to_the_limit_is_accepted(api):
    depth_left = MAX_IMPORT_DEPTH - 4  # file > toolCalls > [0] > result > llmContent
    data = _valid_file(toolCalls=[{"id": "c", "name": "n", "result": {"llmContent": _deep(depth_left)}}])
    assert api.post("/api/sessions/import", data, content_type=JSON).status_code == 201
    deeper = _valid_file(toolCalls=[{"id": "c", "name": "n", "result": {"llmContent": _deep(depth_left + 1)}}])
    refused = api.post("/api/sessions/import", deeper, content_type=JSON)
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("file.toolCalls[0].result.llmContent: nested more than 20 levels deep")


def _time(text):
    return datetime.fromisoformat(text).astimezone(UTC)


def test_a_file_the_ollm_cli_recorded_is_imported_as_written(api):
    """The CLI's ChatRecordingService file: no ollm-site metadata, a provider of its own, an assistant message in
    two parts, a tool call with returnDisplay and metadata.modeHistory (both kept for the export, never shown to
    the model)."""
    recorded = cli_file()
    upload = SimpleUploadedFile("5b0c7d2e.json", CLI_FILE.read_bytes(), content_type=JSON)
    response = api.post("/api/sessions/import", {"file": upload})
    assert response.status_code == 201, response.content
    session = Session.objects.get(pk=response.json()["id"])
    assert (session.model, session.title, session.context_size, session.system_prompt) == (
        "llama3.2:3b",
        "Imported conversation",
        16384,
        "",
    )
    assert (session.created_at, session.last_activity) == (
        _time(recorded["startTime"]),
        _time(recorded["lastActivity"]),
    )
    history = list(session.messages.order_by("position"))
    assert [(m.role, m.content, m.created_at) for m in history] == cli_file_history(recorded)
    tool = history[1]
    assert (tool.tool_call_id, tool.tool_name, tool.tool_args, tool.tool_result) == (
        "call_8f2a41c0",
        "read_file",
        {"path": "packages/core/src/index.ts"},
        None,
    )
    # Exported again, it is the same conversation in the same shape.
    again = api.get(f"/api/sessions/{session.id}/export").json()
    assert [(m["role"], _time(m["timestamp"])) for m in again["messages"]] == [
        (m["role"], _time(m["timestamp"])) for m in recorded["messages"]
    ]
    assert [call["result"] for call in again["toolCalls"]] == [recorded["toolCalls"][0]["result"]]
    assert (again["model"], again["metadata"]["compressionCount"]) == ("llama3.2:3b", 0)


def test_a_tool_result_the_cli_kept_among_the_messages_is_a_tool_result(api):
    """The CLI's SessionMessage role may be "tool": such a result has no call id; an export lists it in toolCalls."""
    data = _valid_file(
        messages=[
            {"role": "user", "parts": [{"type": "text", "text": "count them"}], "timestamp": "2026-01-26T10:00:00Z"},
            {"role": "tool", "parts": [{"type": "text", "text": "42 rows"}], "timestamp": "2026-01-26T10:00:01Z"},
        ]
    )
    body = api.post("/api/sessions/import", data, content_type=JSON).json()
    tool = Message.objects.get(session_id=body["id"], role="tool")
    assert (tool.content, tool.tool_call_id, tool.tool_name, tool.position) == ("42 rows", "", "", 2)
    again = api.get(f"/api/sessions/{body['id']}/export").json()
    assert [m["role"] for m in again["messages"]] == ["user"]
    assert again["toolCalls"] == [
        {"id": "", "name": "", "args": {}, "result": {"llmContent": "42 rows"}, "timestamp": "2026-01-26T10:00:01.000Z"}
    ]


def test_a_file_with_many_problems_names_the_first_ones(api):
    data = {"model": 7, "messages": [{"role": "robot", "parts": "all"}] * 5}
    response = api.post("/api/sessions/import", data, content_type=JSON)
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "file.model: must be a string; "
        'file.messages[0].role: must be one of "user", "assistant", "system" or "tool"; '
        "file.messages[0].parts: must be a list; and 8 more problems"
    )
    assert not Session.objects.exists()


def test_the_openapi_document_names_the_session_file_schema(client, user):
    """Import and export share one schema in the document: the file's camelCase names, only model and messages
    required (what an import needs), the old duplicate gone."""
    client.force_login(user)
    document = client.get("/api/openapi.json").json()
    ref = {"$ref": "#/components/schemas/SessionFile"}
    export = document["paths"]["/api/sessions/{session_id}/export"]["get"]
    assert export["responses"]["200"]["content"]["application/json"]["schema"] == ref
    imports = document["paths"]["/api/sessions/import"]["post"]
    assert imports["requestBody"]["content"]["application/json"]["schema"] == ref
    schemas = document["components"]["schemas"]
    assert "SessionFileOut" not in schemas
    assert set(schemas["SessionFile"]["properties"]) == {
        "sessionId",
        "startTime",
        "lastActivity",
        "model",
        "provider",
        "messages",
        "toolCalls",
        "metadata",
    }
    assert schemas["SessionFile"]["required"] == ["model", "messages"]
    assert set(schemas["SessionFileMessage"]["properties"]) == {"role", "parts", "timestamp"}
    assert schemas["SessionFileMessage"]["properties"]["role"]["enum"] == ["user", "assistant", "system", "tool"]
    assert set(schemas["SessionFileToolCall"]["properties"]) == {"id", "name", "args", "result", "timestamp"}
    assert set(schemas["SessionFileToolResult"]["properties"]) == {"llmContent", "returnDisplay", "data"}
    assert set(schemas["SessionFileMetadata"]["properties"]) == {
        "tokenCount",
        "compressionCount",
        "title",
        "contextSize",
        "systemPrompt",
        "modeHistory",
    }
    assert "OLLM CLI" in schemas["SessionFile"]["description"]


texts = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
entries = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["user", "assistant", "system"]), texts.filter(lambda t: t.strip())),
        st.tuples(st.just("tool"), texts, texts, st.dictionaries(texts, json_values, max_size=3), json_values, texts),
    ),
    max_size=8,
)


@override_settings(OLLM_IMPORTS_PER_MINUTE=1000)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    history=entries,
    title=texts.filter(lambda t: t.strip()),
    system_prompt=texts,
    context_size=st.sampled_from([4096, 16384, 131072]),
)
def test_any_session_survives_the_round_trip(api, user, history, title, system_prompt, context_size):
    session = session_create(
        owner=user, model="llama3.2:3b", context_size=context_size, title=title, system_prompt=system_prompt
    )
    for entry in history:
        if entry[0] == "tool":
            _, call_id, name, args, result, text = entry
            message_create(
                session=session,
                role="tool",
                content=text,
                tool_call_id=call_id,
                tool_name=name,
                tool_args=args,
                tool_result=result,
            )
        else:
            message_create(session=session, role=entry[0], content=entry[1])
    exported = api.get(f"/api/sessions/{session.id}/export").json()
    imported = api.post("/api/sessions/import?on_existing=copy", exported, content_type=JSON)
    assert imported.status_code == 201, imported.content
    again = api.get(f"/api/sessions/{imported.json()['id']}/export").json()
    assert _without_id(again) == _without_id(exported)


# Interop with the real OLLM CLI (issue 19): its sessionId and provider kept, times as it wrote them, a second
# import recognised, and an OpenAPI document that accepts its files.

MILLIS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _say(role, text, timestamp):
    return {"role": role, "parts": [{"type": "text", "text": text}], "timestamp": timestamp}


def test_a_cli_file_comes_back_with_its_session_id_provider_and_times_as_written(api):
    recorded = cli_file()
    response = api.post("/api/sessions/import", recorded, content_type=JSON)
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["source_session_id"], body["source_provider"]) == ("5b0c7d2e-8f3a-4c61-9e27-1d4b6a9f0c83", "local")
    assert api.get(f"/api/sessions/{body['id']}").json()["source_session_id"] == recorded["sessionId"]
    exported = api.get(f"/api/sessions/{body['id']}/export").json()
    # Everything the CLI wrote, as it wrote it.
    for name in ("sessionId", "provider", "startTime", "lastActivity", "model"):
        assert exported[name] == recorded[name], name
    assert [(m["role"], m["timestamp"]) for m in exported["messages"]] == [
        (m["role"], m["timestamp"]) for m in recorded["messages"]
    ]
    assert [(c["id"], c["name"], c["args"], c["timestamp"]) for c in exported["toolCalls"]] == [
        (c["id"], c["name"], c["args"], c["timestamp"]) for c in recorded["toolCalls"]
    ]
    # The messages API writes the same times in the same format.
    history = api.get(f"/api/sessions/{body['id']}/messages?include_compressed=true").json()["items"]
    (call,) = recorded["toolCalls"]
    stamps = [m["timestamp"] for m in recorded["messages"]]
    assert [m["created_at"] for m in history] == [stamps[0], call["timestamp"], *stamps[1:]]
    assert (body["created_at"], body["last_activity"]) == (recorded["startTime"], recorded["lastActivity"])


def test_a_cli_file_exports_back_identical_apart_from_the_documented_additions(api):
    """The whole file, byte for byte once parsed: a message's several text parts, a tool result's
    returnDisplay and the metadata's modeHistory included. What differs is documented (docs/api.md):
    the metadata's title, contextSize and systemPrompt are added, and tokenCount is counted here."""
    recorded = cli_file()
    body = api.post("/api/sessions/import", recorded, content_type=JSON).json()
    exported = api.get(f"/api/sessions/{body['id']}/export").json()
    added = {"title": "Imported conversation", "contextSize": 16384, "systemPrompt": ""}
    assert {key: exported["metadata"].pop(key) for key in added} == added
    assert exported["metadata"].pop("tokenCount") == sum(
        m["tokens"] for m in api.get(f"/api/sessions/{body['id']}/messages?include_compressed=true").json()["items"]
    )
    recorded["metadata"].pop("tokenCount")
    assert exported == recorded
    assert len(exported["messages"][1]["parts"]) == 2


def test_every_time_the_api_writes_is_to_the_millisecond_with_a_z(api, user):
    """Whole seconds included ("…:01.000Z", not "…:01Z"), and times finer than a millisecond cut to it."""
    data = _valid_file(
        startTime="2026-01-26T10:00:00Z",
        lastActivity="2026-01-26T12:00:01.123456+02:00",
        messages=[_say("user", "hi", "2026-01-26T10:00:00Z"), _say("assistant", "hello", "2026-01-26T10:00:01.5Z")],
    )
    body = api.post("/api/sessions/import", data, content_type=JSON).json()
    assert (body["created_at"], body["last_activity"]) == ("2026-01-26T10:00:00.000Z", "2026-01-26T10:00:01.123Z")
    history = api.get(f"/api/sessions/{body['id']}/messages").json()["items"]
    assert [m["created_at"] for m in history] == ["2026-01-26T10:00:00.000Z", "2026-01-26T10:00:01.500Z"]
    exported = api.get(f"/api/sessions/{body['id']}/export").json()
    assert [m["timestamp"] for m in exported["messages"]] == ["2026-01-26T10:00:00.000Z", "2026-01-26T10:00:01.500Z"]
    assert (exported["startTime"], exported["lastActivity"]) == ("2026-01-26T10:00:00.000Z", "2026-01-26T10:00:01.123Z")
    # A session started here, whose times have microseconds.
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192)
    _history(session)
    here = api.get(f"/api/sessions/{session.id}").json()
    texts = [here["created_at"], here["last_activity"]]
    texts += [m["created_at"] for m in api.get(f"/api/sessions/{session.id}/messages").json()["items"]]
    exported = api.get(f"/api/sessions/{session.id}/export").json()
    texts += [exported["startTime"], exported["lastActivity"]]
    texts += [entry["timestamp"] for entry in exported["messages"] + exported["toolCalls"]]
    assert len(texts) == 14
    assert all(MILLIS.match(text) for text in texts), texts
    first = session.messages.order_by("position")[0]
    assert exported["messages"][0]["timestamp"] == first.created_at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def test_a_second_import_of_a_file_is_refused_with_409_naming_the_session(api, bob_api):
    first = api.post("/api/sessions/import", cli_file(), content_type=JSON)
    assert first.status_code == 201
    session_id = first.json()["id"]
    upload = SimpleUploadedFile("5b0c7d2e.json", CLI_FILE.read_bytes(), content_type=JSON)
    for again in (
        api.post("/api/sessions/import", cli_file(), content_type=JSON),
        api.post("/api/sessions/import", {"file": upload}),
    ):
        assert again.status_code == 409
        assert again.json()["session_id"] == session_id
        detail = again.json()["detail"]
        assert f"session {session_id}" in detail
        assert "on_existing=update" in detail
        assert "on_existing=copy" in detail
    assert Session.objects.count() == 1
    assert Message.objects.count() == 5
    # Another user's sessions are not the caller's: bob's import is a session of his own.
    theirs = bob_api.post("/api/sessions/import", cli_file(), content_type=JSON)
    assert theirs.status_code == 201
    assert theirs.json()["source_session_id"] == cli_file()["sessionId"]


def test_a_copy_is_a_new_session_under_its_own_id(api):
    first = api.post("/api/sessions/import", cli_file(), content_type=JSON).json()
    copy = api.post("/api/sessions/import?on_existing=copy", cli_file(), content_type=JSON)
    assert copy.status_code == 201
    body = copy.json()
    assert body["id"] != first["id"]
    assert (body["source_session_id"], body["source_provider"]) == (None, "local")
    exported = api.get(f"/api/sessions/{body['id']}/export").json()
    assert (exported["sessionId"], exported["provider"]) == (body["id"], "local")
    assert Message.objects.filter(session_id=body["id"]).count() == 5
    # The file still names the first session, not the copy.
    again = api.post("/api/sessions/import", cli_file(), content_type=JSON)
    assert (again.status_code, again.json()["session_id"]) == (409, first["id"])


def test_an_update_adds_what_the_file_has_after_the_session_and_keeps_the_rest(api):
    """The CLI went on with the conversation: the session gets the new messages and tool call, nothing else."""
    first = api.post("/api/sessions/import?title=Mine&context_size=8192", cli_file(), content_type=JSON).json()
    session = Session.objects.get(pk=first["id"])
    before = list(session.messages.order_by("position").values_list("id", "content", "created_at"))
    later = cli_file()
    later["messages"] += [
        _say("user", "And the tools?", "2026-01-27T15:00:00.001Z"),
        _say("assistant", "Through ./tools/index.js.", "2026-01-27T15:00:09.999Z"),
    ]
    later["toolCalls"].append(
        {
            "id": "call_2",
            "name": "grep",
            "args": {"q": "tools"},
            "result": {"llmContent": "1 match"},
            "timestamp": "2026-01-27T15:00:05.000Z",
        }
    )
    later["lastActivity"] = "2026-01-27T15:00:09.999Z"
    later["metadata"]["title"] = "Not this title"
    response = api.post("/api/sessions/import?on_existing=update", later, content_type=JSON)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == first["id"]
    assert (body["title"], body["context_size"], body["last_activity"]) == ("Mine", 8192, "2026-01-27T15:00:09.999Z")
    assert Session.objects.count() == 1
    history = list(session.messages.order_by("position"))
    assert [(m.id, m.content, m.created_at) for m in history[:5]] == before
    assert [(m.role, m.content, m.tool_call_id) for m in history[5:]] == [
        ("user", "And the tools?", ""),
        ("tool", "1 match", "call_2"),
        ("assistant", "Through ./tools/index.js.", ""),
    ]
    exported = api.get(f"/api/sessions/{first['id']}/export").json()
    assert exported["sessionId"] == later["sessionId"]
    assert [m["timestamp"] for m in exported["messages"]] == [m["timestamp"] for m in later["messages"]]
    # The same file again adds nothing.
    same = api.post("/api/sessions/import?on_existing=update", later, content_type=JSON)
    assert (same.status_code, same.json()["id"]) == (200, first["id"])
    assert session.messages.count() == 8


def test_an_update_never_removes_what_the_session_holds(api, user):
    """A file the session has gone past adds nothing; one that went another way is a 409 and changes nothing."""
    first = api.post("/api/sessions/import", cli_file(), content_type=JSON).json()
    session = Session.objects.get(pk=first["id"])
    message_create(session=session, role="user", content="Asked here, not in the CLI")
    old = api.post("/api/sessions/import?on_existing=update", cli_file(), content_type=JSON)
    assert (old.status_code, old.json()["id"]) == (200, first["id"])
    assert session.messages.count() == 6
    elsewhere = cli_file()
    elsewhere["messages"].append(_say("user", "Asked in the CLI", "2026-01-27T16:00:00.000Z"))
    refused = api.post("/api/sessions/import?on_existing=update", elsewhere, content_type=JSON)
    assert refused.status_code == 409
    assert refused.json()["session_id"] == first["id"]
    assert "went separate ways at file.messages[4] (user here, user in the file)" in refused.json()["detail"]
    assert "on_existing=copy" in refused.json()["detail"]
    assert list(session.messages.order_by("position").values_list("content", flat=True))[-1] == (
        "Asked here, not in the CLI"
    )
    assert session.messages.count() == 6
    # title and context_size set a new session: an update is told to use PATCH instead.
    later = cli_file()
    later["messages"].append(_say("user", "x", "2026-01-27T16:00:00.000Z"))
    overridden = api.post("/api/sessions/import?on_existing=update&title=New", later, content_type=JSON)
    assert overridden.status_code == 422
    assert f"PATCH /api/sessions/{first['id']}" in overridden.json()["detail"]
    assert api.post("/api/sessions/import?on_existing=merge", later, content_type=JSON).status_code == 422
    assert session.messages.count() == 6


def test_a_session_started_here_is_recognised_by_its_own_id_and_updated_from_the_cli(api, user):
    """Exported, continued in the CLI (which keeps the sessionId), imported back: the same session goes on."""
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192, title="Here")
    _history(session)
    exported = api.get(f"/api/sessions/{session.id}/export").json()
    assert exported["sessionId"] == str(session.id)
    refused = api.post("/api/sessions/import", exported, content_type=JSON)
    assert (refused.status_code, refused.json()["session_id"]) == (409, str(session.id))
    exported["messages"].append(_say("user", "Continued in the CLI", "2099-01-01T00:00:00.000Z"))
    exported["lastActivity"] = "2099-01-01T00:00:00.000Z"
    updated = api.post("/api/sessions/import?on_existing=update", exported, content_type=JSON)
    assert (updated.status_code, updated.json()["id"], updated.json()["source_session_id"]) == (
        200,
        str(session.id),
        None,
    )
    assert list(session.messages.order_by("position").values_list("content", flat=True))[-1] == "Continued in the CLI"
    assert session.messages.count() == 6
    assert Session.objects.count() == 1
    assert api.get(f"/api/sessions/{session.id}/export").json()["sessionId"] == str(session.id)


def test_an_update_compares_messages_and_tool_calls_list_by_list(api, user):
    """A tool result and the next message stored in the same millisecond: the file cannot order them
    by their times, and the update still recognises the session's history in it."""
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192, title="Same millisecond")
    _history(session)
    moment = timezone.now().replace(microsecond=0)
    for offset, message in enumerate(session.messages.order_by("position")):
        Message.objects.filter(pk=message.pk).update(created_at=moment + timedelta(microseconds=offset))
    exported = api.get(f"/api/sessions/{session.id}/export").json()
    exported["messages"].append(_say("user", "Continued", "2099-01-01T00:00:00.000Z"))
    updated = api.post("/api/sessions/import?on_existing=update", exported, content_type=JSON)
    assert updated.status_code == 200, updated.content
    assert list(session.messages.order_by("position").values_list("content", flat=True))[-1] == "Continued"
    assert session.messages.count() == 6


def test_two_imports_of_one_file_at_once_make_one_session(api, monkeypatch):
    """Both looked before either stored: the database keeps one session per file and owner, the other is a 409."""
    first = api.post("/api/sessions/import", cli_file(), content_type=JSON).json()
    real = session_for_file
    calls = []

    def not_yet(**kwargs):
        calls.append(kwargs)
        return None if len(calls) == 1 else real(**kwargs)

    monkeypatch.setattr("chat.services.files.imports.session_for_file", not_yet)
    raced = api.post("/api/sessions/import", cli_file(), content_type=JSON)
    assert len(calls) == 2
    assert (raced.status_code, raced.json()["session_id"]) == (409, first["id"])
    assert Session.objects.count() == 1
    assert Message.objects.count() == 5


def test_the_chat_page_shows_the_files_session_id(api, owner_client, user):
    body = api.post("/api/sessions/import", cli_file(), content_type=JSON).json()
    page = owner_client.get(f"/sessions/{body['id']}/").content.decode()
    found = re.search(r'<p class="muted" id="session-file-id">(.*?)</p>', page, re.S)
    assert found is not None
    panel = found.group(1)
    assert (
        "sessionId <code>5b0c7d2e-8f3a-4c61-9e27-1d4b6a9f0c83</code>, imported (provider <code>local</code>)" in panel
    )
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192)
    own = owner_client.get(f"/sessions/{session.id}/").content.decode()
    assert f"sessionId <code>{session.id}</code>, its own id" in own


def _validator(document, ref):
    """A JSON Schema 2020-12 validator of ``ref`` inside the OpenAPI 3.1 document, formats checked."""
    return jsonschema_rs.Draft202012Validator(
        {"$ref": ref, "components": document["components"]}, validate_formats=True
    )


def test_the_openapi_document_accepts_a_real_cli_file_and_the_apps_export(api, user):
    """What a client validating against the document sees: the CLI's file is a valid import body (it has no
    metadata.title, contextSize or systemPrompt), the app's export a valid export answer, and the import's answer
    a valid session."""
    document = api.get("/api/openapi.json").json()
    operation = document["paths"]["/api/sessions/import"]["post"]
    request = _validator(document, operation["requestBody"]["content"]["application/json"]["schema"]["$ref"])
    recorded = cli_file()
    assert not {"title", "contextSize", "systemPrompt"} & set(recorded["metadata"])
    assert list(request.iter_errors(recorded)) == []
    # The schema does check: a file without its model, or with a part of another type, is not valid.
    assert not request.is_valid({key: value for key, value in recorded.items() if key != "model"})
    assert not request.is_valid({**recorded, "messages": [{"role": "user", "parts": [{"type": "image"}]}]})
    # The smallest file an import takes is valid too.
    assert request.is_valid({"model": "m", "messages": []})
    imported = api.post("/api/sessions/import", recorded, content_type=JSON)
    created = _validator(document, operation["responses"]["201"]["content"]["application/json"]["schema"]["$ref"])
    assert list(created.iter_errors(imported.json())) == []
    conflict = api.post("/api/sessions/import", recorded, content_type=JSON)
    refused = _validator(document, operation["responses"]["409"]["content"]["application/json"]["schema"]["$ref"])
    assert list(refused.iter_errors(conflict.json())) == []
    export = document["paths"]["/api/sessions/{session_id}/export"]["get"]
    answer = _validator(document, export["responses"]["200"]["content"]["application/json"]["schema"]["$ref"])
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192, title="T", system_prompt="S")
    _history(session)
    for session_id in (session.id, imported.json()["id"]):
        exported = api.get(f"/api/sessions/{session_id}/export").json()
        assert list(answer.iter_errors(exported)) == []
        assert list(request.iter_errors(exported)) == []
