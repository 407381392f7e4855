"""Measured retention with summaries over real HTTP from the Ollama stand-in."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from chat.models import Checkpoint, ContextEvent, Message, Session
from chat.selectors.context import session_reliability, session_window
from chat.services.compression import compression_run
from chat.services.messages import message_create
from chat.services.sessions import session_create
from engine.core.aging import Level
from engine.core.salience import said_header, split_said
from tests.factories import LOGIN_QUESTION, SMALL_CONTEXTS, TIER2, WRITER_SIZE_B, converse, small_session
from tests.support.model_server import SERVED_MODEL

pytestmark = pytest.mark.django_db

PLANTED = (
    "The login handler in src/auth/login.ts retries `verify_password` 3 times with a timeout of 30 s; "
    'the error text is "invalid credentials". '
)


@pytest.fixture
def planted_session(user):
    """An 8K session squeezed to 1,200 tokens: twelve answers that plant the same facts, the
    second also a locked decision and a file."""
    session = small_session(user, context_size=TIER2, system_prompt="", compression={"summary_max_tokens": 48})
    converse(session, 12, question=LOGIN_QUESTION, answer=PLANTED * 3, markers_at=1)
    return session


def _said(session: Session) -> str:
    """The header of the ledger's entries of ``session``'s assistant replies: the day they were said."""
    first = Message.objects.filter(session=session, role="assistant").earliest("position")
    return said_header("assistant", first.created_at.date())


def _payload(session: Session, event_type: str) -> Any:
    return ContextEvent.objects.filter(session=session, type=event_type).latest("id").payload


def test_a_summary_that_loses_facts_leaves_them_in_the_ledger_of_the_prompt(user, gateway, fake_ollama):
    # Twice the planted session's context, so that the ledger's share (72 tokens) holds both clauses.
    contexts = {SERVED_MODEL: {TIER2: 2400}}
    planted_session = small_session(
        user,
        context_size=TIER2,
        contexts=contexts,
        system_prompt="",
        parameter_size_b=WRITER_SIZE_B,  # a summary taken as written
        compression={"summary_max_tokens": 48},
    )
    converse(planted_session, 24, question=LOGIN_QUESTION, answer=PLANTED * 3, markers_at=1)
    fake_ollama.behaviour.canned_reply = "Logins were discussed."
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=contexts):
        outcome = compression_run(session_id=planted_session.pk, reason="test", gateway=gateway)
    assert (outcome.status, outcome.reason) == ("compressed", "summarize")
    assert len(fake_ollama.behaviour.requests) == 1, "the ledger needs no second summary"

    checkpoint = Checkpoint.objects.get(session=planted_session)
    assert checkpoint.summary == "Logins were discussed."
    # Each fact stays in the clause that states it, once, whatever the summary lost, with when and by whom.
    assert [text for _, text in checkpoint.ledger] == [
        f"[{_said(planted_session)}] The login handler in src/auth/login.ts retries `verify_password` 3 times "
        "with a timeout of 30 s",
        f'[{_said(planted_session)}] the error text is "invalid credentials".',
    ]
    # The marker lines are in the structured fields already: not written twice.
    assert checkpoint.files_modified == ["src/auth/hash.ts"]
    assert checkpoint.key_decisions == ["Use argon2 for passwords"]
    prompt = "\n".join(block.content for block in session_window(session=planted_session))
    assert (
        f"Facts:\n{_said(planted_session)}: The login handler in src/auth/login.ts retries `verify_password` 3 times"
        in prompt
    )

    payload = _payload(planted_session, "compressed")
    assert payload["retention_summary"] < 0.5  # the summary alone kept almost nothing
    assert payload["ledger_entries"] == len(checkpoint.ledger)
    assert payload["ledger_dropped"] == 0
    revision = checkpoint.revisions.get()
    # Measured on the next prompt, against every specific token of the compressed messages.
    assert {text for _, text in checkpoint.facts} >= {"src/auth/login.ts", "verify_password", "30 s", "argon2"}
    assert revision.facts_total == len(checkpoint.facts) == payload["facts_total"]
    assert revision.missing_facts == []
    assert checkpoint.retention == revision.retention == 1.0


def test_clauses_over_the_ledger_share_are_dropped_by_what_they_say_per_token_and_recorded(user, gateway, fake_ollama):
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL_CONTEXTS):
        session = session_create(
            owner=user,
            model=SERVED_MODEL,
            context_size=8192,
            settings={"compression": {"summary_max_tokens": 48}},
            parameter_size_b=WRITER_SIZE_B,
        )
        for index in range(16):
            message_create(session=session, role="user", content=f"Question {index}?")
            message_create(
                session=session,
                role="assistant",
                content=f"Batch {index} weighs {100 + index} kg and ships from depot-{index:02d}.example.net "
                f"after {20 + index} min. " + PLANTED,
            )
        fake_ollama.behaviour.canned_reply = "Shipments were planned."
        outcome = compression_run(session_id=session.pk, reason="test", gateway=gateway)
    assert outcome.status == "compressed", outcome.reason
    checkpoint = Checkpoint.objects.get(session=session)
    revision = checkpoint.revisions.get()
    # Each entry says when and by whom; the clause is what follows.
    ledger = [split_said(text)[1] for _, text in checkpoint.ledger]
    dropped = [split_said(text)[1] for _, text in revision.ledger_dropped]
    assert {split_said(text)[0] for _, text in checkpoint.ledger} == {_said(session)}
    assert dropped, "sixteen batches of figures do not fit in the ledger's share"
    assert not set(ledger) & set(dropped)
    # Clauses that say as much per token: the newest keep their place.
    kept_batches = [int(text.split()[1]) for text in ledger if text.startswith("Batch ")]
    dropped_batches = [int(text.split()[1]) for text in dropped if text.startswith("Batch ")]
    assert kept_batches
    assert dropped_batches
    assert min(kept_batches) > max(dropped_batches)
    assert "Batch 0 weighs 100 kg and ships from depot-00.example.net after 20 min." in dropped
    # Dropped, and said only in compressed messages: missing from the prompt, still in the full history.
    missing = {text for _, text in revision.missing_facts}
    assert "100 kg" in missing
    assert all(any(token in clause for clause in dropped) for token in missing)
    assert (revision.retention or 0.0) < 1.0
    assert _payload(session, "compressed")["ledger_dropped"] == len(dropped)
    assert "100 kg" in _payload(session, "checkpoint-created")["missing"]
    assert Message.objects.filter(session=session, content__contains="100 kg").exists()


def test_aging_remeasures_against_the_original_facts_and_drives_reliability(planted_session, gateway, fake_ollama):
    Session.objects.filter(pk=planted_session.pk).update(model_parameter_size_b=WRITER_SIZE_B)  # taken as written
    fake_ollama.behaviour.canned_reply = (
        'Login: src/auth/login.ts retries `verify_password` 3 times, timeout 30 s, error "invalid credentials".'
    )
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=SMALL_CONTEXTS):
        compression_run(session_id=planted_session.pk, reason="first", gateway=gateway)
        checkpoint = Checkpoint.objects.get(session=planted_session)
        created = checkpoint.retention
        fake_ollama.behaviour.canned_reply = "Passwords."
        converse(planted_session, 12, start=12, question=LOGIN_QUESTION, answer=PLANTED * 3)
        compression_run(session_id=planted_session.pk, reason="second", gateway=gateway, force=True)
    checkpoint.refresh_from_db()
    revisions = list(checkpoint.revisions.order_by("id"))
    first, aged = (r.retention or 0.0 for r in revisions)
    # Tier 2 keeps three checkpoints: at the next compression the old one ages to level 2.
    assert [r.level for r in revisions] == [Level.RECENT, Level.OLD]
    # The aged summary lost facts; the ledger, which aging never touches, still holds them.
    assert aged == first == created == 1.0
    assert revisions[1].ledger_dropped == []
    assert revisions[1].facts_total == revisions[0].facts_total
    assert _payload(planted_session, "checkpoint-aged")["retention"] == revisions[1].retention
    planted_session.refresh_from_db()
    reliability = session_reliability(session=planted_session)
    active = list(Checkpoint.objects.filter(session=planted_session, merged_into__isnull=True, retired=False))
    weighted = sum(cp.current_tokens * (cp.retention or 0.0) for cp in active) / sum(cp.current_tokens for cp in active)
    assert reliability.context_confidence == pytest.approx(weighted)
