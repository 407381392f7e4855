"""A background compression the model fails is tried again by itself, after each wait of
``OLLM_COMPRESSION_RETRY_SECONDS`` in turn, one retry at a time per session, until the last.

The model is the Ollama stand-in, told to fail (``fail_status``) and then to behave; the waits
are a fraction of a second here, and every wait of the test is on a condition. Its sessions are of
a model that is asked for summaries (``writer``): a small one is asked for none, so the model
cannot fail its compression.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

from chat.models import Checkpoint, ContextEvent, Session
from chat.selectors.presentation import describe_event
from chat.services.compression import (
    compression_attempt,
    compression_maybe_schedule,
    compression_retry_pending,
    compression_run,
    compression_running,
    compression_schedule,
)
from tests.factories import event_types
from tests.support.timing import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("writer")]

SUMMARY = "Logins are validated and audited."


def _errors(session: Session) -> list[dict[str, Any]]:
    return list(
        ContextEvent.objects.filter(session=session, type="compression-error")
        .order_by("id")
        .values_list("payload", flat=True)
    )


def _settled(session: Session) -> bool:
    """No attempt runs or waits to run: no compression thread of this process (no broker), no
    pending retry, no lease."""
    threads = {f"compress-{session.pk}", f"compress-retry-{session.pk}"}
    return (
        not any(thread.name in threads and thread.is_alive() for thread in threading.enumerate())
        and not compression_retry_pending(session_id=session.pk)
        and not compression_running(session_id=session.pk)
    )


def _schedule(session: Session) -> None:
    with transaction.atomic():
        compression_schedule(session_id=session.pk, reason="test")


def _would_schedule(session: Session) -> bool:
    """Whether the budget would schedule a compression now; the transaction is rolled back, so none runs."""
    with transaction.atomic():
        scheduled = compression_maybe_schedule(session=Session.objects.get(pk=session.pk))
        transaction.set_rollback(True)
    return scheduled


@override_settings(OLLM_COMPRESSION_RETRY_SECONDS="0.2,0.5,1,2,4")
def test_a_compression_the_model_failed_is_retried_by_itself_and_succeeds_once_it_answers(
    due_session, fake_ollama, gateway, use_gateway
):
    use_gateway(gateway)
    fake_ollama.behaviour.canned_reply = SUMMARY
    fake_ollama.behaviour.fail_status = 500
    _schedule(due_session)
    first = wait_until(lambda: _errors(due_session), timeout=60, what="the first attempt to fail")[0]
    fake_ollama.behaviour.fail_status = None
    wait_until(lambda: "compressed" in event_types(due_session), timeout=60, what="a retry to compress")
    wait_until(lambda: _settled(due_session), timeout=60, what="the retries to end")

    assert first["error"] == "HostFailed"
    assert (first["attempt"], first["attempts"], first["retry_in"]) == (1, 6, 0.2)
    assert describe_event("compression-error", first).endswith("(attempt 1 of 6); retrying in 0.2 s")
    errors = _errors(due_session)
    assert [e["attempt"] for e in errors] == list(range(1, len(errors) + 1)), "each failure is the next attempt"
    assert all("retry_in" in e for e in errors), "a retry followed every failure"
    kinds = event_types(due_session)
    assert "compression-error" not in kinds[kinds.index("compressed") :], "nothing is retried after a success"
    assert Checkpoint.objects.filter(session=due_session).count() == 1
    assert not Session.objects.get(pk=due_session.pk).compression_started_at


@override_settings(OLLM_COMPRESSION_RETRY_SECONDS="0.1,0.1")
def test_retries_stop_after_the_last_wait_and_the_next_message_may_try_again(
    due_session, fake_ollama, gateway, use_gateway, owner_client
):
    use_gateway(gateway)
    fake_ollama.behaviour.fail_status = 500
    _schedule(due_session)
    wait_until(lambda: any(e.get("gave_up") for e in _errors(due_session)), timeout=60, what="the last attempt")
    wait_until(lambda: _settled(due_session), timeout=60, what="the retries to end")

    errors = _errors(due_session)
    assert [(e["attempt"], e.get("retry_in"), e.get("gave_up")) for e in errors] == [
        (1, 0.1, None),
        (2, 0.1, None),
        (3, None, True),
    ]
    assert describe_event("compression-error", errors[-1]).endswith(
        "(attempt 3 of 3); no more retries: the next message or Compress now tries again"
    )
    timeline = owner_client.get(f"/sessions/{due_session.pk}/timeline/").content.decode()
    assert "(attempt 1 of 3); retrying in 0.1 s" in timeline
    assert "(attempt 3 of 3); no more retries" in timeline
    assert not Checkpoint.objects.filter(session=due_session).exists()
    assert _would_schedule(due_session), "the budget schedules a fresh compression once the retries gave up"


@override_settings(OLLM_COMPRESSION_RETRY_SECONDS="30")
def test_one_retry_waits_per_session_and_a_success_drops_it(due_session, fake_ollama, gateway, use_gateway):
    use_gateway(gateway)
    fake_ollama.behaviour.fail_status = 500
    outcome = compression_attempt(session_id=due_session.pk, reason="test")
    assert (outcome.status, outcome.retry_in) == ("error", 30.0)
    assert compression_retry_pending(session_id=due_session.pk)

    assert not _would_schedule(due_session), "a new message does not ask the failing model again while the retry waits"
    stale = compression_attempt(session_id=due_session.pk, reason="test", attempt=2, token="not-the-pending-one")
    assert stale.status == "skipped"
    assert len(_errors(due_session)) == 1, "a superseded retry runs nothing"

    fake_ollama.behaviour.fail_status = None
    fake_ollama.behaviour.canned_reply = SUMMARY
    assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
    assert not compression_retry_pending(session_id=due_session.pk)
    wait_until(lambda: _settled(due_session), timeout=10, what="the retry that waited to stop waiting")


def test_a_failure_that_asking_again_cannot_mend_is_not_retried(due_session, gateway, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a bug, not the model")

    monkeypatch.setattr("chat.services.compression.run._compress", broken)
    outcome = compression_attempt(session_id=due_session.pk, reason="test")
    assert (outcome.status, outcome.retry_in) == ("error", None)
    (error,) = _errors(due_session)
    assert error["error"] == "ValueError"
    assert not {"retry_in", "attempt", "gave_up"} & error.keys()
    assert not compression_retry_pending(session_id=due_session.pk)
