"""Recall from the full history: every turn's prompt, the prompt for a draft (API and page), the
timeline's count, the drop-in endpoints; and what a rollover of a long everyday chat leaves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client, override_settings

from chat.models import ContextEvent, EventType, Message, Session, Snapshot
from chat.selectors.prompt import session_prompt
from chat.selectors.recall import DRAFT_MAX_CHARS, session_recall
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.compression import compression_run
from chat.services.files import session_file_import
from chat.services.messages import message_create
from chat.services.sessions import session_create
from chat.services.snapshots import snapshot_create, snapshot_restore
from engine.core.prompts import FACTS_REQUEST
from engine.core.recall import RECALL_HEADING
from engine.llm.embedded import MODEL_NAME
from tests.factories import SMALL_CONTEXTS, TIER2, WRITER_SIZE_B, converse, small_session

pytestmark = pytest.mark.django_db(transaction=True)
JSON = "application/json"
EVERYDAY = Path(__file__).resolve().parents[1] / "data" / "everyday" / "tune"
BISCUIT = "We adopted a beagle called Biscuit from the Dogs Trust shelter last Saturday."


@pytest.fixture
def remembered(user):
    """A 2K session of the embedded model whose reply about the dog has left the context."""
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048, system_prompt="Answer in one sentence.")
    message_create(session=session, role="user", content="Any news?")
    reply = message_create(session=session, role="assistant", content=BISCUIT)
    message_create(session=session, role="user", content="Lovely. How is work?")
    message_create(session=session, role="assistant", content="Busy, the quarter ends soon.")
    compression_commit(session=session, message_ids=[reply.id], draft=CheckpointDraft(summary="Family news."))
    session.refresh_from_db()
    return session, reply


def test_a_turn_brings_back_the_old_message_its_question_asks_about(api, remembered):
    session, reply = remembered
    response = api.post(
        f"/api/sessions/{session.pk}/messages", {"content": "What is the name of the beagle?"}, content_type=JSON
    )
    assert response.status_code == 200, response.content
    event = ContextEvent.objects.get(session=session, type=EventType.RECALLED)
    asked = Message.objects.get(session=session, content="What is the name of the beagle?")
    assert event.payload["message"] == asked.position
    assert [item["position"] for item in event.payload["items"]] == [reply.position]
    assert event.payload["items"][0]["words"] == ["beagle"]
    assert event.payload["tokens"] > 0
    # The recall travels in the prompt only: the stored message is the user's own text.
    assert asked.content == "What is the name of the beagle?"


def test_a_turn_that_shares_no_word_with_the_history_recalls_nothing(api, remembered):
    session, _ = remembered
    response = api.post(f"/api/sessions/{session.pk}/messages", {"content": "Thanks!"}, content_type=JSON)
    assert response.status_code == 200, response.content
    assert not ContextEvent.objects.filter(session=session, type=EventType.RECALLED).exists()


def test_the_prompt_for_a_draft_holds_the_recall_before_the_draft_and_stores_nothing(api, remembered):
    session, reply = remembered
    before = (Message.objects.count(), ContextEvent.objects.count())
    body = api.get(f"/api/sessions/{session.pk}/prompt", {"draft": "Which shelter was the beagle from?"}).json()
    kinds = [message["kind"] for message in body["messages"]]
    assert kinds[-2:] == ["recall", "draft"]
    recall = body["messages"][-2]["content"]
    assert recall.startswith(RECALL_HEADING)
    # Dated, who said it, and its relative date made absolute against the day it was said.
    said = reply.created_at.date()
    assert f"[#{reply.position} assistant, {said.day} {said:%B} {said.year}]" in recall
    assert "last Saturday (" in recall
    assert body["messages"][-1]["content"] == "Which shelter was the beagle from?"
    assert body["recalled"] == [
        {
            "position": reply.position,
            "role": "assistant",
            "said_on": said.isoformat(),
            "score": body["recalled"][0]["score"],
            "words": ["beagle", "shelter"],
        }
    ]
    assert body["total_tokens"] > session_prompt(session=session).total_tokens
    assert (Message.objects.count(), ContextEvent.objects.count()) == before
    # Without a draft: the prompt as it stands, no recall.
    plain = api.get(f"/api/sessions/{session.pk}/prompt").json()
    assert "recall" not in [message["kind"] for message in plain["messages"]]
    assert plain["recalled"] == []


def test_a_draft_too_long_for_a_url_is_refused_and_another_users_session_is_not_found(api, bob_api, remembered):
    session, _ = remembered
    too_long = api.get(f"/api/sessions/{session.pk}/prompt", {"draft": "x" * (DRAFT_MAX_CHARS + 1)})
    assert too_long.status_code == 422
    assert "draft" in too_long.content.decode()
    assert bob_api.get(f"/api/sessions/{session.pk}/prompt", {"draft": "beagle"}).status_code == 404


def test_the_context_page_previews_a_draft_and_says_why_each_message_came_back(owner_client, app_gateway, remembered):
    session, reply = remembered
    page = owner_client.get(f"/sessions/{session.pk}/context/", {"draft": "<b>beagle</b> shelter?"}).content.decode()
    assert "Recalled from the full history for your draft" in page
    assert f"#{reply.position}</a> assistant" in page
    assert "beagle, shelter" in page
    assert "&lt;b&gt;beagle&lt;/b&gt; shelter?" in page  # the draft, escaped, in the form and its block
    assert "<b>beagle</b>" not in page
    nothing = owner_client.get(f"/sessions/{session.pk}/context/", {"draft": "Thanks!"}).content.decode()
    assert 'id="recall-none"' in nothing
    refused = owner_client.get(f"/sessions/{session.pk}/context/", {"draft": "x" * (DRAFT_MAX_CHARS + 1)})
    assert "at most 20,000 characters" in refused.content.decode()


def test_the_timeline_counts_the_recalls(api, owner_client, remembered):
    session, _ = remembered
    assert "Recalls: 0 turns" in owner_client.get(f"/sessions/{session.pk}/timeline/").content.decode()
    api.post(f"/api/sessions/{session.pk}/messages", {"content": "Is the beagle well?"}, content_type=JSON)
    page = owner_client.get(f"/sessions/{session.pk}/timeline/").content.decode()
    assert "Recalls: 1 turn " in page
    assert "Recalled 1 message of the history into the prompt answering message" in page


def test_the_drop_in_endpoints_recall_the_same_way(api_token, api_gateway, remembered):
    session, reply = remembered
    client = Client(headers={"Authorization": f"Bearer {api_token}"})
    body = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Where is the beagle from?"}],
        "stream": False,
    }
    response = client.post("/ollama/api/chat", json.dumps(body), content_type=JSON, HTTP_X_OLLM_SESSION=str(session.pk))
    assert response.status_code == 200, response.content
    event = ContextEvent.objects.get(session=session, type=EventType.RECALLED)
    assert [item["position"] for item in event.payload["items"]] == [reply.position]


def test_a_rollover_of_a_long_everyday_chat_fills_the_prompt_with_dated_facts(user, app_gateway):
    chat = json.loads((EVERYDAY / "c_sisters_manchester_kyoto.json").read_text())
    data = {
        "sessionId": "everyday-rollover-test",
        "model": MODEL_NAME,
        "messages": [
            {"role": m["role"], "parts": [{"type": "text", "text": m["content"]}], "timestamp": m["timestamp"]}
            for m in chat["messages"]
        ],
    }
    session = session_file_import(owner=user, data=data, context_size=4096, gateway=app_gateway).session
    Session.objects.filter(pk=session.pk).update(settings={"compression": {"strategy": "truncate"}})
    outcome = compression_run(session_id=session.pk, reason="test", force=True, gateway=app_gateway)
    assert outcome.status == "rolled-over", outcome.reason
    prompt = session_prompt(session=session, gateway=app_gateway)
    # The chat is four times the context: the rollover leaves the prompt at about 60%, never under half.
    assert 0.5 * session.max_tokens <= prompt.total_tokens <= 0.8 * session.max_tokens
    checkpoint = next(block for block in prompt.blocks if block.kind == "checkpoint")
    ledger = checkpoint.content.split("Facts:\n", 1)[1].splitlines()
    # A line per day and speaker, the oldest from the chat's first week.
    assert ledger[0].startswith(("17 September 2023, user: ", "17 September 2023, assistant: "))
    assert all(", user: " in line or ", assistant: " in line for line in ledger)
    assert "Hey" not in " ".join(line.split(": ", 1)[1] for line in ledger).split()


def test_a_model_that_can_summarize_is_asked_for_the_facts_with_whom_and_when(user, gateway, fake_ollama):
    session = small_session(
        user,
        context_size=TIER2,
        system_prompt="",
        parameter_size_b=WRITER_SIZE_B,
        compression={"summary_max_tokens": 64},
    )
    converse(session, 12, answer=BISCUIT + " My sister Ana moved to Leeds in March. " * 3)
    fake_ollama.behaviour.canned_reply = "Ana moved to Leeds in March 2023; the family adopted Biscuit."
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL_CONTEXTS):
        outcome = compression_run(session_id=session.pk, reason="test", force=True, gateway=gateway)
    assert outcome.status == "compressed", outcome.reason
    prompt = fake_ollama.behaviour.requests[0]["messages"][0]["content"]
    assert FACTS_REQUEST in prompt
    said = Message.objects.filter(session=session).earliest("position").created_at.date()
    assert f"[{said.day} {said:%B} {said.year}] assistant: We adopted a beagle" in prompt


def test_the_history_index_follows_each_change_of_what_left_the_context(user):
    # The index is kept between turns: a compression, a restore and an edit each change what it holds.
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048)
    before = snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason="empty")
    message_create(session=session, role="user", content="Any news?")
    dog = message_create(session=session, role="assistant", content=BISCUIT)
    cat = message_create(session=session, role="assistant", content="Our cat Pebble hates the beagle.")

    def recalled(query: str) -> list[int]:
        found = session_recall(session=session, query=query, prompt_tokens=100)
        return [item.candidate.position for item in found.items]

    assert recalled("beagle") == []
    compression_commit(session=session, message_ids=[dog.id], draft=CheckpointDraft(summary="A dog."))
    assert recalled("beagle") == [dog.position]
    compression_commit(session=session, message_ids=[cat.id], draft=CheckpointDraft(summary="A cat."))
    assert recalled("beagle") == [dog.position, cat.position]
    snapshot_restore(snapshot=before)
    assert recalled("beagle") == []
