"""The domain's events, delivered at the edge (issue 48, item 2): the services publish typed events
(``chat.services.events``) and know no transport; ``chat.web.channel_events`` maps each to a channel-layer
message, with the names the chat socket handles; ``chat.tasks.task_dispatch`` runs the requests for
background work, in a Celery worker or a thread of this process. No database here."""

from __future__ import annotations

import logging
import re
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from chat import tasks
from chat.services import events
from chat.services.events import (
    CompressionRequested,
    CompressionRetryDropped,
    EventRecorded,
    GoalsChanged,
    HistoryChanged,
    LoginEnded,
    ProgressReported,
    TitleRequested,
)
from chat.web import channel_events
from chat.web.consumers import ChatConsumer
from tests.support.timing import wait_until

ROOT = Path(__file__).resolve().parents[2]
# The domain below the doors: the services, the reads, the formats, the models.
DOMAIN = ("chat/services", "chat/selectors", "chat/formats", "chat/models")
SESSION = uuid4()


def _domain_sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for folder in DOMAIN
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "migrations" not in path.parts
    }


class Heard:
    """A handler that keeps what it heard."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)


@pytest.fixture
def heard():
    """A ``Heard`` subscribed to ``GoalsChanged`` for the test only."""
    handler = Heard()
    events.subscribe(GoalsChanged, handler)
    yield handler
    events.unsubscribe(GoalsChanged, handler)


def test_a_published_event_reaches_the_handlers_of_its_type_only(heard):
    events.publish(GoalsChanged(session_id=SESSION))
    events.publish(HistoryChanged(session_id=SESSION))
    assert heard.events == [GoalsChanged(session_id=SESSION)]


def test_a_handler_subscribed_twice_hears_each_event_once_and_none_once_unsubscribed(heard):
    events.subscribe(GoalsChanged, heard)
    events.publish(GoalsChanged(session_id=SESSION))
    assert len(heard.events) == 1
    events.unsubscribe(GoalsChanged, heard)
    events.publish(GoalsChanged(session_id=SESSION))
    assert len(heard.events) == 1
    events.subscribe(GoalsChanged, heard)  # as the fixture left it


def test_a_handlers_error_reaches_the_publisher_but_a_pages_update_only_logs_it(caplog):
    def broken(event: Any) -> None:
        raise RuntimeError("the channel layer is down")

    events.subscribe(ProgressReported, broken)
    try:
        with pytest.raises(RuntimeError):
            events.publish(ProgressReported(session_id=SESSION, text="Aging…"))
        with caplog.at_level(logging.ERROR, logger="chat.services.events"):
            events.progress_publish(session_id=SESSION, text="Aging…")  # a missed update fails nothing
        assert "could not publish progress" in caplog.text
    finally:
        events.unsubscribe(ProgressReported, broken)


def test_the_app_subscribes_the_pages_and_the_task_dispatch_once_ready():
    for page_event in (EventRecorded, ProgressReported, HistoryChanged, GoalsChanged, LoginEnded):
        assert events.subscribers(page_event) == (channel_events.deliver,), page_event
    assert events.subscribers(CompressionRequested) == (tasks.task_dispatch,)
    assert events.subscribers(TitleRequested) == (tasks.task_dispatch,)
    assert len(events.subscribers(CompressionRetryDropped)) == 1


def test_each_event_for_the_pages_goes_to_its_group_as_the_message_the_socket_handles():
    created = datetime(2026, 12, 6, 21, 0, tzinfo=UTC)
    recorded = EventRecorded(session_id=SESSION, id=7, type="compressed", payload={"checkpoint": 1}, created_at=created)
    group = f"session-{SESSION}"
    assert channel_events.channel_message(recorded) == (
        group,
        {
            "type": "context.event",
            "event": {"id": 7, "type": "compressed", "payload": {"checkpoint": 1}, "created_at": created.isoformat()},
        },
    )
    assert channel_events.channel_message(ProgressReported(session_id=SESSION, text="Merging…")) == (
        group,
        {"type": "context.progress", "text": "Merging…"},
    )
    assert channel_events.channel_message(HistoryChanged(session_id=SESSION, after_position=4)) == (
        group,
        {"type": "chat.history", "after_position": 4},
    )
    assert channel_events.channel_message(HistoryChanged(session_id=SESSION)) == (
        group,
        {"type": "chat.history", "after_position": None},
    )
    assert channel_events.channel_message(GoalsChanged(session_id=SESSION)) == (group, {"type": "context.goals"})
    assert channel_events.channel_message(LoginEnded(user_id=3, session_key="abc")) == (
        "user-3",
        {"type": "login.ended", "session_key": "abc"},
    )


def test_the_socket_handles_each_message_type_the_edge_sends():
    for message_type in channel_events.MESSAGE_TYPES:
        assert callable(getattr(ChatConsumer, message_type.replace(".", "_"), None)), message_type


def test_the_domain_names_no_transport():
    """No group name, message type, channel layer or consumer loop in the services and below: the edge has them."""
    names = [f'"{name}"' for name in channel_events.MESSAGE_TYPES] + [
        '"session-',
        '"user-',
        "group_send",
        "group_add",
        "channel_layer",
        "get_channel_layer",
        "consumer_loop",
    ]
    found = [(path, name) for path, text in _domain_sources().items() for name in names if name in text]
    assert found == []


def test_the_domain_never_reads_celerys_settings_nor_sends_a_task():
    pattern = re.compile(r"CELERY|celery|send_task|apply_async|current_app")
    found = [(path, match) for path, text in _domain_sources().items() for match in pattern.findall(text)]
    assert found == []


class Recorder:
    """A handler of ``compression_attempt``'s calls, or of a task's ``apply_async``, that keeps them."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.called = threading.Event()

    def __call__(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        self.called.set()

    def apply_async(self, **kwargs: Any) -> None:
        self(**kwargs)


def _alive(name: str) -> bool:
    return any(thread.name == name and thread.is_alive() for thread in threading.enumerate())


def test_without_a_broker_a_compression_runs_in_a_thread_of_the_process(monkeypatch, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    attempt = Recorder()
    monkeypatch.setattr(tasks, "compression_attempt", attempt)
    tasks.task_dispatch(CompressionRequested(session_id=SESSION, reason="test", force=True))
    assert attempt.called.wait(timeout=30)
    assert attempt.calls == [{"session_id": SESSION, "reason": "test", "force": True, "attempt": 1, "token": None}]


def test_without_a_broker_a_retry_waits_in_a_timer_which_a_dropped_retry_cancels(monkeypatch, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    attempt = Recorder()
    monkeypatch.setattr(tasks, "compression_attempt", attempt)
    session_id = uuid4()
    retry = CompressionRequested(session_id=session_id, reason="test", attempt=2, token="t1", delay=600)
    events.publish(retry)
    assert _alive(f"compress-retry-{session_id}")
    events.publish(CompressionRetryDropped(session_id=session_id))
    wait_until(lambda: not _alive(f"compress-retry-{session_id}"), timeout=10, what="the timer to be cancelled")
    assert attempt.calls == []


def test_without_a_broker_a_title_is_written_in_a_thread_of_the_process(monkeypatch, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    write = Recorder()
    monkeypatch.setattr(tasks, "session_title_write", write)
    tasks.task_dispatch(TitleRequested(session_id=SESSION))
    assert write.called.wait(timeout=30)
    assert write.calls == [{"session_id": SESSION}]


def test_with_a_broker_each_request_is_a_celery_task(monkeypatch, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    compress, title = Recorder(), Recorder()
    monkeypatch.setattr(tasks, "compress_session", compress)
    monkeypatch.setattr(tasks, "title_session", title)
    tasks.task_dispatch(CompressionRequested(session_id=SESSION, reason="Compress now", force=True))
    tasks.task_dispatch(CompressionRequested(session_id=SESSION, reason="due", attempt=3, token="t2", delay=4.5))
    tasks.task_dispatch(TitleRequested(session_id=SESSION))
    assert compress.calls == [
        {"args": [str(SESSION), "Compress now", True]},
        {"args": [str(SESSION), "due", False], "kwargs": {"attempt": 3, "token": "t2"}, "countdown": 4.5},
    ]
    assert title.calls == [{"args": [str(SESSION)]}]
    assert not _alive(f"compress-{SESSION}")
