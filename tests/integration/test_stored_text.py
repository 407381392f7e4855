"""Text the database cannot hold (a NUL: PostgreSQL refuses it; an unpaired surrogate: UTF-8
cannot encode it) is stored as U+FFFD wherever user or model text is written (issue 22), so
the request succeeds. Runs on SQLite and, with DATABASE_URL, on PostgreSQL."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from accounts.models import ApiToken
from chat.models import ContextEvent, EventType, Goal, Message, Snapshot
from chat.services.events import event_record
from chat.services.goals import goal_apply_markers
from chat.services.messages import message_create
from chat.services.snapshots import snapshot_create

pytestmark = pytest.mark.django_db

UNSTORABLE = "a\x00b\ud800c"  # a NUL and a lone surrogate
STORED = "a\ufffdb\ufffdc"


def test_a_snapshot_reason_with_a_nul_is_stored_sanitised(api, chat_session):
    body = json.dumps({"reason": "before\x00after"})
    assert "\\u0000" in body  # a JSON body carries it as an escape
    response = api.post(f"/api/sessions/{chat_session.pk}/snapshots", body, content_type="application/json")
    assert response.status_code == 201, response.content
    assert response.json()["reason"] == "before\ufffdafter"
    assert Snapshot.objects.get(session=chat_session).reason == "before\ufffdafter"
    event = ContextEvent.objects.filter(session=chat_session).latest("id")
    assert event.payload["reason"] == "before\ufffdafter"


def test_a_snapshot_reason_with_a_lone_surrogate_is_refused_by_the_api_and_sanitised_by_the_service(api, chat_session):
    # The API's JSON parser (pydantic) refuses an unpaired surrogate escape in any text field: a
    # clear 422 naming the field, nothing stored.
    body = json.dumps({"reason": UNSTORABLE})
    response = api.post(f"/api/sessions/{chat_session.pk}/snapshots", body, content_type="application/json")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-1] == "reason"
    assert not Snapshot.objects.filter(session=chat_session).exists()
    # Other callers of the service (the automatic snapshots' reasons) are sanitised.
    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL, reason=UNSTORABLE)
    assert Snapshot.objects.get(pk=snapshot.pk).reason == STORED


def test_a_token_name_from_the_command_is_stored_sanitised(user):
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "alice", name=f" {UNSTORABLE} ", stdout=out, stderr=err)
    assert out.getvalue().strip()
    assert ApiToken.objects.get(user=user).name == STORED


def test_a_token_name_from_the_form_is_stored_sanitised(owner_client, user):
    # A form body is UTF-8 decoded with replacement, so only the NUL can arrive raw.
    response = owner_client.post("/account/tokens/", {"name": "ci\x00script"}, follow=True)
    assert response.status_code == 200
    assert ApiToken.objects.get(user=user).name == "ci\ufffdscript"
    assert "ci\ufffdscript" in response.content.decode()


def test_a_message_s_tool_fields_and_done_reason_are_stored_sanitised(chat_session):
    message = message_create(
        session=chat_session,
        role="tool",
        content="result",
        tool_call_id=UNSTORABLE,
        tool_name=UNSTORABLE,
        done_reason=UNSTORABLE,
    )
    message = Message.objects.get(pk=message.pk)
    assert (message.tool_call_id, message.tool_name, message.done_reason) == (STORED, STORED, STORED)


def test_a_next_step_marker_in_a_reply_is_stored_sanitised(chat_session):
    applied = goal_apply_markers(session=chat_session, text=f"[GOAL] Ship it\n[NEXT] {UNSTORABLE}\n")
    assert applied == 2
    # The marker parser drops a NUL itself; the surrogate is replaced when stored.
    assert Goal.objects.get(session=chat_session).next_step == "ab\ufffdc"


def test_tool_arguments_and_results_with_nuls_are_stored_sanitised_keys_included(chat_session):
    # Every JSON column encodes through StorableJSONEncoder: on PostgreSQL a \u0000 escape inside
    # jsonb is refused (this write was a DataError there), and SQLite stored the NUL raw. (An import
    # file refuses such JSON with a 422 at its place before anything is written.)
    message = message_create(
        session=chat_session,
        role="tool",
        content="result",
        tool_args={"path\x00": ["src/a\x00.py", {"mode": UNSTORABLE}]},
        tool_result={"rows\x00": "2\x00"},
    )
    message = Message.objects.get(pk=message.pk)
    assert message.tool_args == {"path\ufffd": ["src/a\ufffd.py", {"mode": STORED}]}
    assert message.tool_result == {"rows\ufffd": "2\ufffd"}


def test_an_event_payload_with_a_nul_is_stored_sanitised(chat_session):
    event = event_record(
        session=chat_session, type=EventType.COMPRESSION_ERROR, payload={"error": f"model said {UNSTORABLE}"}
    )
    assert ContextEvent.objects.get(pk=event.pk).payload == {"error": f"model said {STORED}"}


def test_a_search_filter_with_a_nul_matches_nothing_instead_of_failing(api, chat_session):
    # On PostgreSQL a NUL in a query parameter was a 500 (schemathesis found it in the model filter).
    response = api.get("/api/search", {"q": "hello", "model": "llama\x00x"})
    assert response.status_code == 200, response.content
    assert response.json()["total"] == 0
