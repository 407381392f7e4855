"""Measured retention with summaries over real HTTP from the Ollama stand-in."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from chat.models import Session
from chat.services import message_create, session_create
from contextmgr.core.aging import Level
from contextmgr.llm.gateway import Gateway
from contextmgr.models import Checkpoint, ContextEvent
from contextmgr.selectors import session_reliability
from contextmgr.services.compression import compression_run
from tests.integration.test_compression import SMALL
from tests.support.model_server import SERVED_MODEL

pytestmark = pytest.mark.django_db

PLANTED = (
    "The login handler in src/auth/login.ts retries `verify_password` 3 times with a timeout of 30 s; "
    'the error text is "invalid credentials". '
)


def converse(session: Session, turns: int, start: int = 0) -> None:
    for index in range(start, start + turns):
        message_create(session=session, role="user", content=f"Question {index} about logins?")
        markers = "[DECISION] Use argon2 for passwords - LOCKED\n[ARTIFACT] Created src/auth/hash.ts\n"
        message_create(session=session, role="assistant", content=(markers if index == 1 else "") + PLANTED * 3)


@pytest.fixture
def gateway(ollama_backend):
    return Gateway(mode="ollama", embedded=None, ollama=ollama_backend)


@pytest.fixture
def due_session(user):
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL):
        session = session_create(
            owner=user, model=SERVED_MODEL, context_size=8192, settings={"compression": {"summary_max_tokens": 48}}
        )
    converse(session, 12)
    return session


def _payload(session: Session, event_type: str) -> Any:
    return ContextEvent.objects.filter(session=session, type=event_type).latest("id").payload


def test_a_summary_that_loses_facts_is_retried_then_its_decisions_and_paths_are_kept(due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = "Logins were discussed."
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL):
        outcome = compression_run(session_id=due_session.pk, reason="test", gateway=gateway)
    assert outcome.status == "compressed"
    prompts = [r["messages"][-1]["content"] for r in fake_ollama.behaviour.requests]
    assert len(prompts) == 2, "one summary, one retry"
    assert "left out these facts" in prompts[1]
    assert "src/auth/login.ts" in prompts[1]
    assert "30 s" in prompts[1]

    checkpoint = Checkpoint.objects.get(session=due_session)
    # The lost path was appended to the structured fields; the marker decision was there already.
    assert checkpoint.files_modified == ["src/auth/hash.ts", "src/auth/login.ts"]
    assert "Use argon2 for passwords" in checkpoint.key_decisions
    facts = {text for _, text in checkpoint.facts}
    assert {"src/auth/login.ts", "verify_password", "30 s", "invalid credentials", "Use argon2 for passwords"} <= facts
    payload = _payload(due_session, "compressed")
    assert payload["retention_first"] < 0.6
    assert payload["retention"] > payload["retention_first"]
    assert payload["facts_appended"] >= 1
    assert payload["facts_total"] == len(checkpoint.facts)
    revision = checkpoint.revisions.get()
    assert (revision.facts_total, revision.facts_kept) == (payload["facts_total"], payload["facts_kept"])
    assert checkpoint.retention == pytest.approx(revision.facts_kept / revision.facts_total)
    assert {text for _, text in revision.missing_facts} >= {"verify_password", "30 s", "invalid credentials"}


@override_settings(OLLM_RETENTION_THRESHOLD=0.01)
def test_a_summary_above_the_threshold_is_not_retried(due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = "Nothing kept."
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL):
        compression_run(session_id=due_session.pk, reason="test", gateway=gateway)
    assert len(fake_ollama.behaviour.requests) == 1
    assert _payload(due_session, "compressed")["facts_appended"] == 0


def test_aging_remeasures_against_the_original_facts_and_drives_reliability(due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = (
        'Login: src/auth/login.ts retries `verify_password` 3 times, timeout 30 s, error "invalid credentials".'
    )
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL):
        compression_run(session_id=due_session.pk, reason="first", gateway=gateway)
        checkpoint = Checkpoint.objects.get(session=due_session)
        created = checkpoint.retention
        fake_ollama.behaviour.canned_reply = "Passwords."
        converse(due_session, 12, start=12)
        compression_run(session_id=due_session.pk, reason="second", gateway=gateway, force=True)
    checkpoint.refresh_from_db()
    revisions = list(checkpoint.revisions.order_by("id"))
    first, aged = (r.retention or 0.0 for r in revisions)
    # Tier 2 keeps one checkpoint: at the next compression the old one merges into the ultra one.
    assert [r.level for r in revisions] == [Level.RECENT, Level.ULTRA]
    # The aged text lost facts; the structured fields still hold the decision and the path.
    assert aged <= first == created
    assert revisions[1].facts_total == revisions[0].facts_total
    assert _payload(due_session, "checkpoint-aged")["retention"] == revisions[1].retention
    due_session.refresh_from_db()
    reliability = session_reliability(session=due_session)
    active = list(Checkpoint.objects.filter(session=due_session, merged_into__isnull=True, retired=False))
    weighted = sum(cp.current_tokens * (cp.retention or 0.0) for cp in active) / sum(cp.current_tokens for cp in active)
    assert reliability.context_confidence == pytest.approx(weighted)
