"""Events"""

from __future__ import annotations

import pytest

from chat.models import ContextEvent, EventType, Snapshot
from chat.services.compression import compression_run
from chat.services.lease import lease_acquire, lease_release
from chat.services.snapshots import SnapshotError, snapshot_create, snapshot_restore
from tests.factories import event_types, small_session, until_due

pytestmark = pytest.mark.django_db

SPEC_EVENTS = {
    "compressed",
    "compression-skipped",
    "compression-error",
    "rollover-complete",
    "checkpoint-created",
    "checkpoint-aged",
    "snapshot-created",
    "snapshot-restored",
    "snapshot-error",
    "auto-snapshot-created",
}


def last(session, event_type: str):
    return ContextEvent.objects.filter(session=session, type=event_type).latest("id").payload


def test_the_event_names_are_the_specs():
    """Spec: "### Compression Events" (`compressed` ... `checkpoint-aged`) and "### Snapshot Events"
    (`snapshot-created` ... `auto-snapshot-created`).

    Differs, see docs/conformance.md: "Events" — three more, `prompt-truncated`, for Ollama's silent cut,
    `recalled`, for a turn whose prompt brought old messages back from the full history, and `model-switched`,
    for a switch of the session's model (its context recounted)."""
    assert set(EventType.values) == SPEC_EVENTS | {"prompt-truncated", "recalled", "model-switched"}


def test_compressed_and_checkpoint_created(due_session, gateway, fake_ollama):
    """Spec: "`compressed` - Compression completed" and "`checkpoint-created` - New checkpoint created"."""
    fake_ollama.behaviour.canned_reply = "Recap."
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert event_types(due_session) == ["auto-snapshot-created", "checkpoint-created", "compressed"]
    assert last(due_session, "checkpoint-created")["checkpoint"] == outcome.checkpoint_id
    compressed = last(due_session, "compressed")
    assert compressed["checkpoint"] == outcome.checkpoint_id
    assert compressed["tokens_after"] < compressed["tokens_before"]


def test_compression_skipped_when_not_needed(chat_session, gateway):
    """Spec: "`compression-skipped` - Compression skipped (not needed)"."""
    assert compression_run(session_id=chat_session.pk, gateway=gateway).status == "skipped"
    assert event_types(chat_session) == ["compression-skipped"]
    assert last(chat_session, "compression-skipped")["reason"].startswith("not needed")


def test_compression_error_when_it_fails(due_session, gateway, fake_ollama):
    """Spec: "`compression-error` - Compression failed"."""
    fake_ollama.behaviour.fail_status = 503
    assert compression_run(session_id=due_session.pk, gateway=gateway).status == "error"
    assert event_types(due_session)[-1] == "compression-error"
    assert last(due_session, "compression-error")["error"] == "HostFailed"


def test_rollover_complete(user, gateway, fake_ollama):
    """Spec: "`rollover-complete` - Context rollover completed"."""
    fake_ollama.behaviour.canned_reply = "Recap of everything."
    session = small_session(user, context_size=4096)
    until_due(session)
    assert compression_run(session_id=session.pk, gateway=gateway).status == "rolled-over"
    assert event_types(session)[-1] == "rollover-complete"
    payload = last(session, "rollover-complete")
    assert payload["messages"] > 0
    assert payload["tokens_after"] < payload["tokens_before"]


def test_checkpoint_aged(due_session, gateway, fake_ollama):
    """Spec: "`checkpoint-aged` - Checkpoint aged"."""
    fake_ollama.behaviour.canned_reply = "A recap of the earlier answers, step by step, with the main points."
    first = compression_run(session_id=due_session.pk, gateway=gateway).checkpoint_id
    assert "checkpoint-aged" not in event_types(due_session)
    until_due(due_session, start=100)
    compression_run(session_id=due_session.pk, gateway=gateway)
    aged = last(due_session, "checkpoint-aged")
    assert (aged["checkpoint"], aged["from_level"], aged["to_level"]) == (first, 3, 2)


def test_snapshot_created(chat_session):
    """Spec: "`snapshot-created` - Snapshot created"."""
    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL, reason="by hand")
    assert event_types(chat_session) == ["snapshot-created"]
    assert last(chat_session, "snapshot-created")["snapshot"] == snapshot.id


def test_auto_snapshot_created(due_session, gateway, fake_ollama):
    """Spec: "`auto-snapshot-created` - Auto-snapshot created"."""
    fake_ollama.behaviour.canned_reply = "Recap."
    compression_run(session_id=due_session.pk, gateway=gateway)
    auto = Snapshot.objects.get(session=due_session)
    assert auto.kind == "auto"
    assert last(due_session, "auto-snapshot-created")["snapshot"] == auto.id
    assert "snapshot-created" not in event_types(due_session)


def test_snapshot_restored(chat_session):
    """Spec: "`snapshot-restored` - Snapshot restored"."""
    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL)
    undo = snapshot_restore(snapshot=snapshot)
    assert undo is not None
    assert event_types(chat_session)[-1] == "snapshot-restored"
    assert last(chat_session, "snapshot-restored")["snapshot"] == snapshot.id
    assert last(chat_session, "snapshot-restored")["undo_snapshot"] == undo.id


def test_snapshot_error(chat_session):
    """Spec: "`snapshot-error` - Snapshot operation failed"."""
    snapshot = snapshot_create(session=chat_session, kind=Snapshot.Kind.MANUAL)
    token = lease_acquire(session_id=chat_session.pk)  # a compression is running
    assert token is not None
    try:
        with pytest.raises(SnapshotError):
            snapshot_restore(snapshot=snapshot)
    finally:
        lease_release(session_id=chat_session.pk, token=token)
    assert event_types(chat_session)[-1] == "snapshot-error"
    assert "compression of this session is running" in last(chat_session, "snapshot-error")["reason"]
    assert "snapshot-restored" not in event_types(chat_session)


def test_events_are_persisted_in_order(due_session, gateway, fake_ollama):
    """Spec: "### Compression Events" / "### Snapshot Events" — each is recorded when it happens, in order."""
    fake_ollama.behaviour.canned_reply = "Recap."
    compression_run(session_id=due_session.pk, gateway=gateway)
    compression_run(session_id=due_session.pk, gateway=gateway)
    times = list(ContextEvent.objects.filter(session=due_session).order_by("id").values_list("created_at", flat=True))
    assert times == sorted(times)
    assert event_types(due_session) == [
        "auto-snapshot-created",
        "checkpoint-created",
        "compressed",
        "compression-skipped",
    ]
