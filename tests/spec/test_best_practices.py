"""Best Practices

Each practice the spec recommends, done through the product (its pages, API and services) and
shown to have the effect the spec promises. "Use snapshots for experimentation" and "Restore
snapshots if conversation goes off track" are one flow here: a snapshot, an experiment, a restore.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from chat.models import Checkpoint, Decision, Message, Session, Snapshot
from chat.selectors.context import active_checkpoints, active_messages, session_budget
from chat.services.compression import compression_maybe_schedule, compression_run
from chat.services.goals import goal_checkpoint_set
from tests.factories import (
    converse,
    event_types,
    prompt,
    session_on_model_of_size,
    small_session,
    summary_requests,
    until_due,
)

pytestmark = pytest.mark.django_db

RECAP = "A recap of the answers so far, with the main points."
OFFER = "Start a new conversation from here"


def _compress(session: Session, gateway, times: int, *, start: int = 0) -> int:
    """``times`` compressions, each once the conversation is due; the next turn index."""
    turn = start
    for _ in range(times):
        turn = until_due(session, start=turn)
        assert compression_run(session_id=session.pk, gateway=gateway).status == "compressed"
    return turn


def _page(client, session: Session) -> str:
    response = client.get(reverse("chat:chat", args=[session.pk]))
    assert response.status_code == 200
    return str(response.content.decode())


def _reliability(client, session: Session) -> dict[str, Any]:
    response = client.get(f"/api/sessions/{session.pk}/context")
    assert response.status_code == 200
    return dict(response.json())


# --- 1. Compression ------------------------------------------------------------------------------


def test_compression_is_on_by_default_and_compresses_a_long_conversation(
    user, client, gateway, fake_ollama, django_capture_on_commit_callbacks
):
    """Spec: "Enable compression for long conversations".

    A session started with no settings has compression on: once the conversation reaches its trigger,
    storing a message schedules a compression, which frees room; with compression turned off the page
    says so and nothing is scheduled."""
    fake_ollama.behaviour.canned_reply = RECAP
    client.force_login(user)
    default = small_session(user, settings={})
    assert "Compression is off" not in _page(client, default)
    until_due(default)
    with django_capture_on_commit_callbacks() as callbacks:
        assert compression_maybe_schedule(session=default)
    assert [c for c in callbacks if c.__qualname__.startswith("compression_schedule")], "a compression is scheduled"
    before = session_budget(session=default)
    assert compression_run(session_id=default.pk, gateway=gateway).status == "compressed"
    assert session_budget(session=default).active_tokens < before.active_tokens

    off = small_session(user, compression={"enabled": False})
    assert "Compression is off" in _page(client, off)
    until_due(off)
    with django_capture_on_commit_callbacks() as callbacks:
        assert not compression_maybe_schedule(session=off)
    assert not [c for c in callbacks if c.__qualname__.startswith("compression_schedule")]


def test_the_reliability_score_is_shown_and_falls_with_each_compression(user, client, gateway, fake_ollama):
    """Spec: "Monitor reliability score".

    The chat page and the API show the score, its level and the compressions; each compression lowers it."""
    fake_ollama.behaviour.canned_reply = RECAP
    client.force_login(user)
    session = session_on_model_of_size(user, "70B", gateway, fake_ollama)
    assert "Full context · nothing compressed yet" in _page(client, session)
    scores = [_reliability(client, session)["reliability"]["score"]]
    turn = 0
    for count in (1, 2):
        turn = _compress(session, gateway, 1, start=turn)
        context = _reliability(client, session)
        score = context["reliability"]["score"]
        scores.append(score)
        session.refresh_from_db()
        assert score == pytest.approx(session.reliability_score)
        percent = round(score * 100)
        level = context["reliability"]["level"]
        assert f"Reliability: {level} {percent}% · {count} compression" in _page(client, session)
        assert f"{percent}%" in context["display"]
    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == 3, f"each compression lowers the score: {scores}"


def test_below_40_percent_the_page_offers_a_new_conversation(user, client, gateway, fake_ollama):
    """Spec: "Start new conversation if reliability drops below 40%".

    After one compression a 3B model's score is below 40% and the page offers to start a new conversation
    (one click: it carries the goal into a new session); a 70B model's is above and it is not offered."""
    fake_ollama.behaviour.canned_reply = RECAP
    client.force_login(user)
    offered = {}
    sessions = {}
    for size in ("3B", "70B"):
        session = session_on_model_of_size(user, size, gateway, fake_ollama, goal="Ship the onboarding flow")
        _compress(session, gateway, 1)
        score = _reliability(client, session)["reliability"]["score"]
        offered[size] = (score < 0.40, OFFER in _page(client, session))
        sessions[size] = session
    assert offered == {"3B": (True, True), "70B": (False, False)}, offered

    small = sessions["3B"]
    response = client.post(reverse("chat:session_continue", args=[small.pk]))
    assert response.status_code == 302
    successor = Session.objects.exclude(pk__in=[s.pk for s in sessions.values()]).get()
    assert response["Location"] == reverse("chat:chat", args=[successor.pk])
    assert successor.compression_count == 0
    assert "ACTIVE GOAL: Ship the onboarding flow" in prompt(successor)[0][1]
    assert OFFER not in _page(client, successor), "a fresh start, nothing compressed"


def test_larger_models_stay_reliable_for_longer(user, client, gateway, fake_ollama):
    """Spec: "Use larger models for complex long-term tasks".

    After the same three compressions a 70B model's score is still above 40% and the page neither gives the spec's
    warning nor offers a new conversation, while a
    7B model's is below it and the page recommends a larger model and offers a new conversation."""
    fake_ollama.behaviour.canned_reply = RECAP
    client.force_login(user)
    scores, pages = {}, {}
    for size in ("7B", "70B"):
        session = session_on_model_of_size(user, size, gateway, fake_ollama)
        _compress(session, gateway, 3)
        scores[size] = _reliability(client, session)["reliability"]["score"]
        pages[size] = _page(client, session)
    assert scores["70B"] >= 0.40 > scores["7B"], scores
    assert "Use larger model for complex long-term tasks" in pages["7B"]
    assert OFFER in pages["7B"]
    assert "has compressed the conversation" not in pages["70B"], "within the large band's 5-7 compressions"
    assert OFFER not in pages["70B"]


# --- 2. Goals and Decisions ----------------------------------------------------------------------


def test_a_decision_marked_never_compress_stays_verbatim(user, client, gateway, fake_ollama):
    """Spec: "Always mark important decisions as "never compress"".

    A decision locked on the page is in every prompt, word for word, through four compressions that turned the
    answer that gave it, and the conversation around it, into checkpoints down to the ultra level."""
    fake_ollama.behaviour.canned_reply = RECAP
    client.force_login(user)
    session = small_session(user)
    decision = "Use argon2id for every stored password, never bcrypt"
    converse(session, 1, answer=f"We talked it through and settled it: {decision}. The reasons follow at length. " * 3)
    response = client.post(
        reverse("context:decision_new", args=[session.pk]), {"description": decision, "locked": "on"}
    )
    assert response.status_code == 200
    assert Decision.objects.get(session=session).locked
    turn = 1
    for _ in range(4):
        turn = _compress(session, gateway, 1, start=turn)
        assert f"🔒 {decision}" in prompt(session)[0][1]
    discussed = Message.objects.get(session=session, content__startswith="We talked it through")
    assert discussed.compressed_into is not None, "the answer that gave the decision was compressed"
    assert Checkpoint.objects.filter(session=session, level=0).exists(), "compressed down to the ultra level"
    assert Decision.objects.get(session=session).description == decision


def test_a_goal_set_at_the_start_and_its_checkpoints_survive_all_compressions(user, gateway, fake_ollama):
    """Spec: "Set clear goals at conversation start", "Track checkpoints for complex tasks" and "Goals are preserved
    across all compressions".

    A goal given when the session starts, with its checkpoints, is in every prompt after five compressions (through
    the ultra merge), and every summary was asked for with the goal in view."""
    fake_ollama.behaviour.canned_reply = RECAP
    session = session_on_model_of_size(user, "7B", gateway, fake_ollama, goal="Ship the onboarding flow")
    goal = session.goals.get()
    goal_checkpoint_set(goal=goal, description="Design the welcome screen", status="completed")
    goal_checkpoint_set(goal=goal, description="Write the signup form", status="in-progress")
    goal_checkpoint_set(goal=goal, description="Measure where visitors drop out", status="pending")
    pinned = [
        "ACTIVE GOAL: Ship the onboarding flow",
        "✅ Design the welcome screen",
        "🔄 Write the signup form",
        "⏳ Measure where visitors drop out",
    ]
    head = prompt(session)[0][1]
    assert all(text in head for text in pinned)
    turn = 0
    for _ in range(5):
        fake_ollama.behaviour.requests.clear()
        turn = _compress(session, gateway, 1, start=turn)
        assert all(text in prompt(session)[0][1] for text in pinned)
        asked = [r["messages"][-1]["content"] for r in summary_requests(fake_ollama)]
        assert asked
        assert "Ship the onboarding flow" in asked[0], "the summary is asked for with the goal in view"
    assert session.goals.get().status == "active"
    oldest = active_checkpoints(session=session).first()
    assert oldest is not None
    assert oldest.level == 0, "the oldest is ultra"


# --- 3. Session Management -----------------------------------------------------------------------


def test_the_full_history_is_kept_reviewable_exportable_and_searchable(user, client, gateway, fake_ollama):
    """Spec: "Full history always saved to disk", "Review full history anytime", "Export sessions for documentation"
    and "Search across sessions for insights".

    After three compressions every message is still stored as written; the full history page shows each one, the
    export holds each one in order, and a search finds a compressed answer and another session's message."""
    fake_ollama.behaviour.canned_reply = RECAP
    client.force_login(user)
    session = small_session(user)
    converse(session, 1, answer="The lighthouse keeper logs every passing ship in a leather ledger.")
    _compress(session, gateway, 3, start=1)
    other = small_session(user)
    converse(other, 1, question="Where does the lighthouse keeper sleep?")
    written = list(Message.objects.filter(session=session).order_by("position").values_list("role", "content"))
    assert Message.objects.filter(session=session, compressed_into__isnull=False).exists()
    # The answer left the context (its clause may stay in a checkpoint's ledger); the history keeps it whole.
    answer = Message.objects.get(session=session, content__startswith="The lighthouse keeper logs")
    assert answer.compressed_into_id is not None

    history = client.get(reverse("chat:session_full_history", args=[session.pk]))
    assert history.status_code == 200
    page = history.content.decode()
    for _, content in written:
        assert content.strip() in page

    exported = client.get(reverse("chat:session_export", args=[session.pk]))
    assert exported.status_code == 200
    messages = json.loads(exported.content)["messages"]
    assert [(m["role"], "".join(p["text"] for p in m["parts"])) for m in messages] == written

    found = client.get(reverse("search:search"), {"q": "lighthouse keeper"}).content.decode()
    assert "logs every passing ship" in found
    assert "Where does the" in found
    assert str(session.pk) in found
    assert str(other.pk) in found


# --- 4. Snapshots --------------------------------------------------------------------------------


def test_a_snapshot_before_an_experiment_restores_the_conversation_and_is_kept(user, client, gateway, fake_ollama):
    """Spec: "Create snapshots before major changes", "Use snapshots for experimentation", "Restore snapshots if
    conversation goes off track" and "Keep important snapshots for reference".

    A snapshot taken with the page's button, an experiment (more turns, a compression), then a restore from the
    restore page: the next prompt is the one before the experiment, the experiment stays in the full history, and
    the snapshot is still there to restore again."""
    fake_ollama.behaviour.canned_reply = RECAP
    client.force_login(user)
    session = small_session(user)
    turn = _compress(session, gateway, 1)
    converse(session, 1, start=turn)
    before = (prompt(session), list(active_messages(session=session).values_list("id", flat=True)))
    response = client.post(reverse("context:snapshot_new", args=[session.pk]))
    assert response.status_code == 200
    snapshot = Snapshot.objects.get(session=session, kind=Snapshot.Kind.MANUAL)

    converse(session, 3, start=turn + 1, question="Off-track question {index}?")
    _compress(session, gateway, 1, start=turn + 4)
    assert prompt(session) != before[0]

    page = client.get(reverse("context:snapshot_restore", args=[snapshot.pk]))
    assert page.status_code == 200
    restored = client.post(reverse("context:snapshot_restore", args=[snapshot.pk]))
    assert restored.status_code == 302
    assert (prompt(session), list(active_messages(session=session).values_list("id", flat=True))) == before
    assert Message.objects.filter(session=session, content__startswith="Off-track question").count() == 3
    assert event_types(session)[-1] == "snapshot-restored"
    assert Snapshot.objects.filter(pk=snapshot.pk).exists(), "kept for reference"
    assert f"{reverse('context:snapshot_restore', args=[snapshot.pk])}" in _page(client, session)
