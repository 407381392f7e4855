"""Pages and the admin never fail on stored data (issue 36): every page of a session and every admin view render
over rows holding the extremes their columns can store, written straight into the database as an older release,
a manual edit or a bug could have left them."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from django.contrib import admin as django_admin
from django.core.management import call_command
from django.db import connection, models
from django.urls import reverse

from chat.formats.archive_file import CHECKPOINT_KEYS, CHECKPOINT_LIST_KEYS, SNAPSHOT_KEYS
from chat.models import Checkpoint, CheckpointRevision, ContextEvent, Message, Session, Snapshot
from chat.services.files import session_archive_import
from engine.core.config import MAX_CONTEXT_TOKENS

pytestmark = pytest.mark.django_db

# Far beyond any range an import allows, yet small enough that the database's own sums over a session's rows
# fit its 64 bits (SQLite refuses an overflowing SUM itself, which no page could format around).
BIG = 2**48
# The floats a column can hold: the largest, the most negative, the infinities (SQLite stores NaN as NULL).
FLOATS = {"largest": 1e308, "most negative": -1e308, "infinite": math.inf, "minus infinite": -math.inf}
IDS = {*CHECKPOINT_KEYS, *CHECKPOINT_LIST_KEYS, *SNAPSHOT_KEYS}


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password="pw-root-123", email="r@example.com")


def _numbers_replaced(value: Any, number: float) -> Any:
    """``value`` (an event's payload) with every figure in it ``number`` (the ids of what it names kept)."""
    if isinstance(value, dict):
        return {key: item if key in IDS else _numbers_replaced(item, number) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers_replaced(item, number) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return number
    return value


def _store_extremes(session: Session, number: float) -> None:
    # PostgreSQL's integer columns hold at most 2**31 - 1 (SQLite's any 64-bit value): the largest each holds.
    big = BIG if connection.vendor == "sqlite" else 2**31 - 1
    Session.objects.filter(pk=session.pk).update(
        reliability_score=number,
        model_parameter_size_b=number,
        max_tokens=big,
        system_prompt_tokens=big,
        compression_count=big,
        context_version=big,
        compressed_through=big,
        # Settings no check today accepts: the pages fall back on the defaults.
        settings={
            "compression": {"preserve_recent": big, "summary_max_tokens": big},
            "sampling": {"temperature": math.copysign(1e308, number), "top_k": big},
        },
    )
    Message.objects.filter(session=session).update(tokens=big, context_version=big)
    Checkpoint.objects.filter(session=session).update(
        original_tokens=big, current_tokens=big, compression_count=big, number=big, retention=number
    )
    CheckpointRevision.objects.filter(checkpoint__session=session).update(
        tokens=big, retention=number, facts_total=big, facts_kept=big
    )
    # A stored snapshot refuses every change through its manager: the test writes past it, as the database could.
    models.QuerySet(model=Snapshot).filter(session=session).update(
        token_count=big, message_count=big, checkpoint_count=big
    )
    # The numbers of JSON: the largest double stands for a huge one (JSON holds no infinity).
    huge = math.copysign(1e308, number)
    for snapshot in Snapshot.objects.filter(session=session):
        state = snapshot.state
        state["session"] |= {"max_tokens": big, "system_prompt_tokens": big, "compression_count": big}
        state["checkpoints"] = [cp | {"original_tokens": big, "retention": huge} for cp in state["checkpoints"]]
        models.QuerySet(model=Snapshot).filter(pk=snapshot.pk).update(state=state)
    for event in ContextEvent.objects.filter(session=session):
        ContextEvent.objects.filter(pk=event.pk).update(payload=_numbers_replaced(event.payload, huge))


def _pages(session: Session) -> list[str]:
    """Every page of the session a browser opens (GET), the lists and the search over it."""
    names = [
        "chat",
        "session_full_history",
        "context_window",
        "context_meter",
        "session_export",
        "session_archive",
    ]
    pages = ["/", "/search/?q=JWT", reverse("context:timeline", args=[session.pk])]
    pages += [reverse(f"chat:{name}", args=[session.pk]) for name in names]
    snapshot = session.snapshots.first()
    assert snapshot is not None
    pages.append(reverse("context:snapshot_restore", args=[snapshot.pk]))
    return pages


def _admin_views(session: Session) -> list[str]:
    """Every model's changelist in the admin, and the change page of one row of each that the session holds."""
    views = ["/admin/", "/admin/chat/session/?q=a", "/admin/chat/session/?reliability=CRITICAL"]
    for model in django_admin.site._registry:
        meta = model._meta
        views.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        field = next((f.name for f in meta.get_fields() if f.name == "session" or f.name == "checkpoint"), None)
        if model is Session:
            rows: Any = Session.objects.filter(pk=session.pk)
        elif field == "session":
            rows = model._default_manager.filter(session=session)
        elif field == "checkpoint":
            rows = model._default_manager.filter(checkpoint__session=session)
        else:
            continue
        row = rows.first()
        if row is not None:
            views.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk]))
    return views


@pytest.mark.parametrize("number", FLOATS.values(), ids=FLOATS.keys())
def test_every_page_and_admin_view_renders_over_extreme_stored_values(client, admin_user, number):
    call_command("seed_demo")
    session = Session.objects.get(owner=admin_user)
    _store_extremes(session, number)
    client.force_login(admin_user)
    failed = {}
    for url in _pages(session) + _admin_views(session):
        status = client.get(url).status_code
        if status != 200:
            failed[url] = status
    assert not failed
    # The score shows within its bounds, whatever is stored.
    page = client.get(reverse("admin:chat_session_change", args=[session.pk])).content.decode()
    assert ("(100%)" if number > 0 else "(0%)") in page
    # The export writes every number within its range, so its archive imports again (its settings are checked as
    # when they are saved, so the ones no check accepts go first: an import refuses them with 422).
    Session.objects.filter(pk=session.pk).update(settings={})
    archive = client.get(reverse("chat:session_archive", args=[session.pk]))
    copy = session_archive_import(
        owner=admin_user, data=json.loads(b"".join(archive.streaming_content) if archive.streaming else archive.content)
    )
    assert 0.0 <= copy.reliability_score <= 1.0
    assert copy.max_tokens == MAX_CONTEXT_TOKENS
