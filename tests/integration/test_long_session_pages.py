"""Long sessions' pages: the chat page shows a window of the history with links to the rest, the
timeline pages its events and checkpoints, and nothing a page does not show is read for it."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat.models import Checkpoint, ContextEvent, EventType, Message, Snapshot
from chat.selectors.sessions import HISTORY_WINDOW
from chat.services.snapshots import snapshot_create
from chat.web.context_views import TIMELINE_PAGE

pytestmark = pytest.mark.django_db


@pytest.fixture
def long_session(chat_session):
    """2.5 windows of messages, stored in bulk."""
    Message.objects.bulk_create(
        Message(session=chat_session, position=i, role="user", content=f"line {i}", tokens=5)
        for i in range(1, HISTORY_WINDOW * 5 // 2 + 1)
    )
    return chat_session


def positions(html: str) -> list[int]:
    return [int(p) for p in re.findall(r"#(\d+) · \d+ tokens", html)]


def test_the_chat_page_shows_the_latest_window_and_links_to_the_earlier_one(owner_client, long_session):
    total = HISTORY_WINDOW * 5 // 2
    url = reverse("chat:chat", args=[long_session.pk])
    html = owner_client.get(url).content.decode()
    assert positions(html) == list(range(total - HISTORY_WINDOW + 1, total + 1))
    assert f"{total - HISTORY_WINDOW} earlier messages" in html
    earlier = f"?before={total - HISTORY_WINDOW + 1}"
    assert earlier in html
    assert 'id="history-later"' not in html

    page = owner_client.get(url + earlier).content.decode()
    assert positions(page) == list(range(total - 2 * HISTORY_WINDOW + 1, total - HISTORY_WINDOW + 1))
    assert f"{HISTORY_WINDOW} later messages" in page  # and "show the latest"
    oldest = owner_client.get(url + f"?before={total - 2 * HISTORY_WINDOW + 1}").content.decode()
    assert positions(oldest) == list(range(1, total - 2 * HISTORY_WINDOW + 1))
    assert 'id="history-earlier"' not in oldest


@pytest.mark.parametrize("value", ["0", "1", "999999", "-5", "abc", "²", "9" * 40])
def test_a_before_that_is_no_page_shows_the_latest(owner_client, long_session, value):
    total = HISTORY_WINDOW * 5 // 2
    response = owner_client.get(reverse("chat:chat", args=[long_session.pk]), {"before": value})
    assert response.status_code == 200
    assert positions(response.content.decode())[-1] == total


def _compressions(session, count: int) -> None:
    ultra = Checkpoint.objects.create(
        session=session,
        number=count + 1,
        level=0,
        first_position=1,
        last_position=9,
        summary="ultra",
        original_tokens=9,
        current_tokens=3,
    )
    Checkpoint.objects.bulk_create(
        Checkpoint(
            session=session,
            number=n,
            level=0,
            first_position=n * 10 + 1,
            last_position=n * 10 + 10,
            summary=f"summary {n}",
            original_tokens=9,
            current_tokens=3,
            merged_into=ultra,
        )
        for n in range(1, count + 1)
    )
    ContextEvent.objects.bulk_create(
        ContextEvent(session=session, type=EventType.COMPRESSED, payload={"reliability": 0.5, "n": n})
        for n in range(1, count + 1)
    )


def test_the_timeline_shows_the_newest_page_of_events_and_checkpoints_and_links_to_older_ones(
    owner_client, chat_session
):
    count = TIMELINE_PAGE * 2 + 7
    _compressions(chat_session, count)
    url = reverse("context:timeline", args=[chat_session.pk])
    html = owner_client.get(url).content.decode()
    shown = [int(n) for n in re.findall(r"<h3>Checkpoint #(\d+) ", html)]
    assert shown == list(range(2 * TIMELINE_PAGE + 1, count + 2))  # the newest page, the ultra one last
    assert html.count('class="event-compressed"') == count - 2 * TIMELINE_PAGE
    assert f"Events {2 * TIMELINE_PAGE + 1}–{count} of {count}" in html
    assert "?events_page=2&amp;checkpoints_page=3" in html  # older events, the checkpoints page kept

    older = owner_client.get(url, {"events_page": "1", "checkpoints_page": "1"}).content.decode()
    assert [int(n) for n in re.findall(r"<h3>Checkpoint #(\d+) ", older)] == list(range(1, TIMELINE_PAGE + 1))
    assert older.count('class="event-compressed"') == TIMELINE_PAGE
    assert 'rel="next"' in older
    # The refresh every 3 s asks for the page shown, not the newest one.
    assert 'hx-get="/sessions/' in older
    assert "events_page=1" in older.split('id="timeline-body"')[1].split(">")[0]


@pytest.mark.parametrize("value", ["0", "99", "x", "-1"])
def test_a_timeline_page_that_does_not_exist_shows_a_page_that_does(owner_client, chat_session, value):
    _compressions(chat_session, TIMELINE_PAGE + 1)
    response = owner_client.get(reverse("context:timeline", args=[chat_session.pk]), {"events_page": value})
    assert response.status_code == 200
    assert 'class="event-compressed"' in response.content.decode()


def test_the_chat_page_reads_no_snapshot_state_and_no_checkpoint_texts(owner_client, long_session):
    snapshot_create(session=long_session, kind=Snapshot.Kind.MANUAL, reason="before")
    checkpoint = Checkpoint.objects.create(
        session=long_session,
        number=1,
        level=3,
        first_position=1,
        last_position=10,
        summary="s",
        original_tokens=9,
        current_tokens=3,
    )
    Message.objects.filter(session=long_session).update(compressed_into=checkpoint)
    with CaptureQueriesContext(connection) as queries:
        html = owner_client.get(reverse("chat:chat", args=[long_session.pk])).content.decode()
    assert "compressed into checkpoint #1, level 3 (recent)" in html
    assert 'id="snapshots-panel"' in html
    assert "Restore…" in html
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    snapshot_reads = [sql for sql in reads if 'FROM "contextmgr_snapshot"' in sql]
    assert snapshot_reads
    assert not any('"contextmgr_snapshot"."state"' in sql for sql in snapshot_reads)
    message_reads = [sql for sql in reads if 'FROM "chat_message"' in sql and "contextmgr_checkpoint" in sql]
    assert message_reads
    assert not any('"contextmgr_checkpoint"."facts"' in sql for sql in message_reads)
