"""The context over the API: budget, prompt, checkpoints, goals, decisions, artifacts, snapshots, events."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from chat.models import Checkpoint, ContextEvent, Decision, Goal, Snapshot
from chat.selectors.context import session_budget
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.goals import goal_create
from chat.services.messages import message_create
from chat.services.sessions import session_create
from engine.core.budget import REPLY_MIN_TOKENS
from engine.llm.embedded import MODEL_NAME

pytestmark = pytest.mark.django_db
JSON = "application/json"


@pytest.fixture
def talk(chat_session):
    """Two exchanges, the first reply compressed into checkpoint 1."""
    message_create(session=chat_session, role="user", content="Plan the migration")
    reply = message_create(session=chat_session, role="assistant", content="First, copy the tables. " * 20)
    message_create(session=chat_session, role="user", content="And then?")
    message_create(session=chat_session, role="assistant", content="Then switch the reads.")
    checkpoint = compression_commit(
        session=chat_session,
        message_ids=[reply.id],
        draft=CheckpointDraft(summary="Copy the tables first.", key_decisions=("copy first",)),
    )
    chat_session.refresh_from_db()
    return chat_session, checkpoint


def test_context_reports_the_budget(api, talk):
    session, checkpoint = talk
    goal_create(session=session, description="Finish the migration")
    body = api.get(f"/api/sessions/{session.id}/context").json()
    budget = session_budget(session=session)
    assert body["max_tokens"] == 13600
    assert body["system_tokens"] == session.system_prompt_tokens > 0
    assert body["goal_tokens"] > 0
    assert body["system_tokens"] + body["goal_tokens"] == budget.system_prompt_tokens
    assert body["checkpoint_tokens"] == checkpoint.current_tokens
    assert body["message_tokens"] == budget.active_tokens
    assert (body["available"], body["trigger_at"]) == (budget.available, budget.trigger_at)
    assert body["usage_pct"] == round(100 * budget.used / 13600, 1)
    assert body["exact"] is False
    assert body["compression_count"] == 1
    assert body["reliability"]["level"] == "Critical"
    assert 0 < body["reliability"]["score"] < 0.4
    assert body["display"] == f"Context: {budget.used:,}/13,600 🔴 {body['reliability']['percent']}% (1 compression)"


def test_prompt_lists_the_blocks_the_next_call_sends(api, talk):
    session, _ = talk
    goal_create(session=session, description="Finish the migration")
    body = api.get(f"/api/sessions/{session.id}/prompt").json()
    kinds = [m["kind"] for m in body["messages"]]
    assert kinds == ["system", "goal", "checkpoint", "message", "message", "message"]
    assert body["messages"][0] == {
        "role": "system",
        "content": "You are helpful.",
        "tokens": session.system_prompt_tokens,
        "kind": "system",
    }
    assert "Finish the migration" in body["messages"][1]["content"]
    assert "Copy the tables first." in body["messages"][2]["content"]
    assert [m["content"] for m in body["messages"][3:]] == ["Plan the migration", "And then?", "Then switch the reads."]
    # An Ollama model cannot count before the call: the estimate carries a safety margin.
    assert body["exact"] is False
    assert body["total_tokens"] > sum(m["tokens"] for m in body["messages"])


def test_prompt_is_counted_exactly_on_the_embedded_model(api, user):
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048, system_prompt="Be brief.")
    message_create(session=session, role="user", content="Hello there")
    body = api.get(f"/api/sessions/{session.id}/prompt").json()
    assert body["exact"] is True
    assert [m["kind"] for m in body["messages"]] == ["system", "message"]
    assert 0 < body["total_tokens"] < 60


def test_prompt_says_whether_it_leaves_the_reply_its_room(api, user):
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048)
    message_create(session=session, role="user", content="Hello there")
    url = f"/api/sessions/{session.id}/prompt"
    body = api.get(url).json()
    assert (body["room_tokens"], body["fits"]) == (session.max_tokens - REPLY_MIN_TOKENS, True)
    # A draft that does not fit: the turn would compress before it asks the model.
    long_draft = "Tell me about the harbour and the boats that leave it at dawn. " * 120
    drafted = api.get(f"{url}?{urlencode({'draft': long_draft})}").json()
    assert drafted["total_tokens"] > drafted["room_tokens"]
    assert drafted["fits"] is False
    # An imported history over the room: the next turn compresses first.
    for number in range(6):
        message_create(session=session, role="assistant", content=f"Reply {number}: " + "the tide came in. " * 80)
    body = api.get(url).json()
    assert body["total_tokens"] > body["room_tokens"]
    assert body["fits"] is False


def test_checkpoints_carry_their_revisions(api, talk):
    session, checkpoint = talk
    body = api.get(f"/api/sessions/{session.id}/checkpoints").json()
    assert body["count"] == 1
    (item,) = body["items"]
    assert item["id"] == checkpoint.id
    assert (item["level"], item["range"], item["compression_number"], item["active"]) == (
        3,
        checkpoint.range_label,
        1,
        True,
    )
    assert item["key_decisions"] == ["copy first"]
    assert item["summary"] == "Copy the tables first."
    assert item["current_tokens"] == checkpoint.current_tokens
    assert item["original_tokens"] == checkpoint.original_tokens
    assert [(r["level"], r["reason"]) for r in item["revisions"]] == [(3, "created")]
    assert item["revisions"][0]["tokens"] == checkpoint.current_tokens
    # Retention, measured against the key facts of the compressed messages.
    revision = checkpoint.revisions.get()
    assert item["retention"] == checkpoint.retention
    assert item["facts_total"] == len(checkpoint.facts)
    assert (item["revisions"][0]["facts_total"], item["revisions"][0]["facts_kept"]) == (
        revision.facts_total,
        revision.facts_kept,
    )
    assert item["revisions"][0]["retention"] == revision.retention
    assert item["revisions"][0]["missing_facts"] == revision.missing_facts


def test_messages_lists_the_active_context_or_the_full_history(api, talk):
    session, checkpoint = talk
    active = api.get(f"/api/sessions/{session.id}/messages").json()
    assert [m["content"] for m in active["items"]] == ["Plan the migration", "And then?", "Then switch the reads."]
    assert all(m["in_active_context"] and m["compressed_into"] is None for m in active["items"])
    full = api.get(f"/api/sessions/{session.id}/messages?include_compressed=true").json()
    assert full["count"] == 4
    assert [m["position"] for m in full["items"]] == [1, 2, 3, 4]
    compressed = full["items"][1]
    assert (compressed["role"], compressed["compressed_into"], compressed["in_active_context"]) == (
        "assistant",
        checkpoint.id,
        False,
    )
    assert set(compressed) >= {"id", "role", "content", "tokens", "created_at"}
    page = api.get(f"/api/sessions/{session.id}/messages?include_compressed=true&limit=2&offset=2").json()
    assert [m["position"] for m in page["items"]] == [3, 4]


def test_goals_decisions_and_artifacts(api, chat_session):
    base = f"/api/sessions/{chat_session.id}"
    first = api.post(f"{base}/goals", {"description": "Ship v1", "priority": "high"}, content_type=JSON)
    assert first.status_code == 201
    goal_id = first.json()["id"]
    assert (first.json()["status"], first.json()["priority"]) == ("active", "high")

    checkpoint = api.post(f"/api/goals/{goal_id}/checkpoints", {"description": "Write tests"}, content_type=JSON)
    assert checkpoint.status_code == 201
    assert checkpoint.json()["status"] == "pending"
    done = api.patch(f"/api/goal-checkpoints/{checkpoint.json()['id']}", {"status": "completed"}, content_type=JSON)
    assert done.json()["status"] == "completed"

    decision = api.post(
        f"/api/goals/{goal_id}/decisions", {"description": "Use PostgreSQL", "locked": True}, content_type=JSON
    )
    assert decision.status_code == 201
    assert (decision.json()["locked"], decision.json()["goal_id"]) == (True, goal_id)
    unlocked = api.patch(f"/api/decisions/{decision.json()['id']}", {"locked": False}, content_type=JSON)
    assert unlocked.json()["locked"] is False

    artifact = api.post(
        f"/api/goals/{goal_id}/artifacts", {"path": "src/app.py", "action": "created"}, content_type=JSON
    )
    assert artifact.status_code == 201
    assert artifact.json()["path"] == "src/app.py"

    second = api.post(f"{base}/goals", {"description": "Ship v2"}, content_type=JSON).json()
    goals = api.get(f"{base}/goals").json()
    assert [(g["description"], g["status"]) for g in goals["items"]] == [("Ship v1", "paused"), ("Ship v2", "active")]
    v1 = goals["items"][0]
    assert [c["description"] for c in v1["checkpoints"]] == ["Write tests"]
    assert [d["description"] for d in v1["decisions"]] == ["Use PostgreSQL"]
    assert [a["path"] for a in v1["artifacts"]] == ["src/app.py"]

    reactivated = api.patch(f"/api/goals/{goal_id}", {"status": "active"}, content_type=JSON).json()
    assert reactivated["status"] == "active"
    assert Goal.objects.get(pk=second["id"]).status == "paused"
    assert api.delete(f"/api/goals/{goal_id}").status_code == 204
    assert not Goal.objects.filter(pk=goal_id).exists()
    assert Decision.objects.filter(session=chat_session, description="Use PostgreSQL").exists()


@pytest.mark.parametrize(
    ("path", "payload", "detail"),
    [
        ("goals", {"description": "   "}, "description is empty."),
        ("goals", {"description": "x" * 2001}, "description is 2,001 characters long"),
    ],
)
def test_goal_service_errors_are_422(api, chat_session, path, payload, detail):
    response = api.post(f"/api/sessions/{chat_session.id}/{path}", payload, content_type=JSON)
    assert response.status_code == 422
    assert detail in response.json()["detail"]
    assert not Goal.objects.exists()


def test_goal_schema_errors_are_422(api, chat_session):
    goal = goal_create(session=chat_session, description="Ship")
    bad_priority = api.post(
        f"/api/sessions/{chat_session.id}/goals", {"description": "x", "priority": "urgent"}, content_type=JSON
    )
    assert bad_priority.status_code == 422
    assert bad_priority.json()["detail"][0]["loc"] == ["body", "payload", "priority"]
    assert api.patch(f"/api/goals/{goal.id}", {"status": "done"}, content_type=JSON).status_code == 422
    assert (
        api.post(f"/api/goals/{goal.id}/artifacts", {"path": "a", "action": "x"}, content_type=JSON).status_code == 422
    )
    empty_path = api.post(f"/api/goals/{goal.id}/artifacts", {"path": " ", "action": "created"}, content_type=JSON)
    assert empty_path.json() == {"detail": "path is empty."}
    assert api.patch("/api/goals/0", {}, content_type=JSON).status_code == 422
    assert api.patch(f"/api/goals/{2**63}", {}, content_type=JSON).status_code == 422
    assert api.patch(f"/api/goals/{2**63 - 1}", {}, content_type=JSON).status_code == 404


def test_snapshots_and_restore(api, talk):
    session, _ = talk
    base = f"/api/sessions/{session.id}"
    created = api.post(f"{base}/snapshots", {"reason": "before the experiment"}, content_type=JSON)
    assert created.status_code == 201
    snapshot = created.json()
    assert (snapshot["kind"], snapshot["reason"], snapshot["message_count"]) == ("manual", "before the experiment", 4)
    prompt_before = api.get(f"{base}/prompt").json()

    message_create(session=session, role="user", content="A detour")
    assert api.get(f"{base}/prompt").json() != prompt_before
    restored = api.post(f"/api/snapshots/{snapshot['id']}/restore")
    assert restored.status_code == 200
    body = restored.json()
    assert body["restored"]["id"] == snapshot["id"]
    assert body["undo_snapshot"]["kind"] == "auto"
    assert body["context"]["compression_count"] == 1
    assert api.get(f"{base}/prompt").json() == prompt_before
    listed = api.get(f"{base}/snapshots").json()
    assert [s["id"] for s in listed["items"]] == [body["undo_snapshot"]["id"], snapshot["id"]]
    assert api.post(f"{base}/snapshots", {"reason": "r" * 201}, content_type=JSON).status_code == 422


def test_a_restore_while_a_compression_holds_the_session_is_409(api, talk):
    from chat.services.lease import lease_acquire

    session, _ = talk
    snapshot = api.post(f"/api/sessions/{session.id}/snapshots", {}, content_type=JSON).json()
    assert lease_acquire(session_id=session.id) is not None
    response = api.post(f"/api/snapshots/{snapshot['id']}/restore")
    assert response.status_code == 409
    assert "a compression of this session is running" in response.json()["detail"]


def test_events_in_order_and_after_an_id(api, talk):
    session, _ = talk
    api.post(f"/api/sessions/{session.id}/snapshots", {}, content_type=JSON)
    events = api.get(f"/api/sessions/{session.id}/events").json()["items"]
    types = [e["type"] for e in events]
    assert types[:2] == ["checkpoint-created", "compressed"]
    assert types[-1] == "snapshot-created"
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert set(events[0]) == {"id", "type", "payload", "created_at"}
    after = api.get(f"/api/sessions/{session.id}/events?after={events[1]['id']}").json()["items"]
    assert [e["id"] for e in after] == [e["id"] for e in events[2:]]
    assert api.get(f"/api/sessions/{session.id}/events?after=-1").status_code == 422


def test_compress_and_wait_answers_with_the_outcome(api, user):
    """The real model summarizes; a Tier 1 session always rolls over."""
    session = session_create(
        owner=user,
        model=MODEL_NAME,
        context_size=2048,
        settings={"compression": {"summary_max_tokens": 48}, "snapshots": {"auto_create": False}},
    )
    for n in range(3):
        message_create(session=session, role="user", content=f"Question {n} about the schema?")
        message_create(session=session, role="assistant", content=f"Answer {n}: the schema has a users table. " * 30)
    before = api.get(f"/api/sessions/{session.id}/context").json()
    response = api.post(f"/api/sessions/{session.id}/compress?wait=true")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "rolled-over"
    checkpoint = Checkpoint.objects.get(pk=body["checkpoint_id"])
    assert checkpoint.level == 0
    assert body["context"]["compression_count"] == 1
    assert body["context"]["message_tokens"] < before["message_tokens"]
    assert ContextEvent.objects.filter(session=session, type="rollover-complete").exists()
    assert not Snapshot.objects.filter(session=session).exists()
