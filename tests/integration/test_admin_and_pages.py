from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles.views import serve
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import RequestFactory
from django.urls import reverse

from chat.models import (
    Checkpoint,
    CheckpointRevision,
    ContextEvent,
    Decision,
    EventType,
    Goal,
    Message,
    Session,
    Snapshot,
)
from chat.selectors.context import session_budget
from chat.services.events import event_record
from chat.services.revisions import message_leave_context
from chat.services.sessions import session_create
from engine.core.aging import Level

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password="pw-root-123", email="r@example.com")


@pytest.fixture
def demo(admin, capsys):
    call_command("seed_demo")
    return Session.objects.get(owner=admin)


def test_seed_demo_builds_a_reviewable_session(demo, capsys):
    out = capsys.readouterr().out
    assert f"Created demo session {demo.id}" in out
    assert demo.compression_count == 4
    active = Checkpoint.objects.filter(session=demo, merged_into__isnull=True).order_by("number")
    assert [cp.level for cp in active] == [Level.ULTRA, Level.ANCIENT, Level.OLD, Level.RECENT]
    tokens = [cp.current_tokens for cp in active]
    assert tokens == sorted(tokens)
    assert [cp.revisions.count() for cp in active] == [4, 3, 2, 1]
    assert Decision.objects.filter(session=demo, locked=True).count() == 2
    assert demo.goals.get().checkpoints.count() == 3
    assert set(Snapshot.objects.filter(session=demo).values_list("kind", flat=True)) == {"auto", "manual"}
    types = set(ContextEvent.objects.filter(session=demo).values_list("type", flat=True))
    assert {"compressed", "checkpoint-created", "checkpoint-aged", "snapshot-created", "auto-snapshot-created"} <= types
    assert all(m.compressed_into is None or m.role == "assistant" for m in demo.messages.all())


def test_seed_demo_needs_an_owner():
    with pytest.raises(CommandError, match="Create an admin first"):
        call_command("seed_demo")
    with pytest.raises(CommandError, match="There is no user 'nobody'"):
        call_command("seed_demo", user="nobody")


def test_admin_review_pages(client, admin, demo):
    client.force_login(admin)
    changelist = client.get(reverse("admin:chat_session_changelist"))
    assert changelist.status_code == 200
    assert "Demo: user authentication" in changelist.content.decode()
    assert " / 13,600 tokens" in changelist.content.decode()
    for query, present in [
        ("?q=root", True),
        ("?q=nomatch", False),
        ("?tier=3", True),
        ("?tier=1", False),
        ("?reliability=CRITICAL", True),
        ("?reliability=HIGH", False),
        ("?model=llama3.2:3b", True),
    ]:
        page = client.get(reverse("admin:chat_session_changelist") + query).content.decode()
        assert ("Demo: user authentication" in page) is present, query
    change = client.get(reverse("admin:chat_session_change", args=[demo.id])).content.decode()
    assert "Messages 2-14" in change
    assert "checkpoint-aged" in change
    oldest = Checkpoint.objects.filter(session=demo).order_by("number").first()
    assert oldest is not None
    revisions = client.get(reverse("admin:chat_checkpoint_change", args=[oldest.id])).content.decode()
    assert revisions.count('<td class="field-reason">') == 4
    for name in ["goal", "decision", "artifact", "snapshot", "contextevent", "checkpoint"]:
        assert client.get(reverse(f"admin:chat_{name}_changelist")).status_code == 200
    assert client.get(reverse("admin:chat_message_changelist") + "?q=JWT").status_code == 200


def test_a_staff_account_reviews_every_session_read_only(client, django_user_model, demo):
    """Staff made in the admin (is_staff, no superuser, no group) review: they see the conversation
    models of every user, view only, and nothing of the accounts."""
    reviewer = django_user_model.objects.create_user(username="rita", password="pw-rita-123", is_staff=True)
    client.force_login(reviewer)
    index = client.get(reverse("admin:index")).content.decode()
    assert "have permission to view or edit anything" not in index
    assert reverse("admin:chat_session_changelist") in index
    assert reverse("admin:auth_user_changelist") not in index
    changelist = client.get(reverse("admin:chat_session_changelist"))
    assert changelist.status_code == 200
    assert "Demo: user authentication" in changelist.content.decode()  # the superuser's session
    change = client.get(reverse("admin:chat_session_change", args=[demo.id]))
    assert change.status_code == 200
    assert 'name="_save"' not in change.content.decode()
    for name in ["goal", "decision", "artifact", "snapshot", "contextevent", "checkpoint"]:
        assert client.get(reverse(f"admin:chat_{name}_changelist")).status_code == 200, name
    assert client.get(reverse("admin:chat_session_delete", args=[demo.id])).status_code == 403
    assert client.get(reverse("admin:auth_user_changelist")).status_code == 403
    assert Session.objects.filter(pk=demo.pk).exists()
    # Without staff, or once deactivated, the same account reviews nothing.
    reviewer.is_staff = False
    reviewer.save()
    assert client.get(reverse("admin:chat_session_changelist")).status_code == 302
    assert not reviewer.has_perm("chat.view_session")
    reviewer.is_staff, reviewer.is_active = True, False
    assert not reviewer.has_perm("chat.view_session")


def test_the_session_list_reads_every_budget_together_and_right(client, admin, demo, django_assert_max_num_queries):
    """The context column of each row is the session's own budget, goal block included, read for the
    whole page at once: the page's queries do not grow with its rows."""
    client.force_login(admin)
    for number in range(6):
        session = session_create(owner=admin, title=f"Listed {number}", model="llama3.2:3b", context_size=4096)
        if number % 2:
            Goal.objects.create(session=session, description=f"Goal {number}: ship the login flow")
            Decision.objects.create(session=session, description="Use JWT", locked=True)
    changelist = reverse("admin:chat_session_changelist")
    client.get(changelist)
    with django_assert_max_num_queries(20) as queries:
        html = client.get(changelist).content.decode()
    assert len(queries) < 20
    expected = {
        session.title: f"{session_budget(session=session).used:,} / {session.max_tokens:,} tokens"
        for session in Session.objects.all()
    }
    listed = dict(zip(_cells_th(html, "title"), _cells(html, "context"), strict=True))
    assert listed == expected
    assert len(listed) == 7
    # The goal block counts: a session with a goal uses more than the same session without one.
    assert (
        session_budget(session=Session.objects.get(title="Listed 1")).used
        > session_budget(session=Session.objects.get(title="Listed 0")).used
    )


def _cells_th(html: str, column: str) -> list[str]:
    """The text of the first column's cells (a changelist's link column is a header cell)."""
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(rf'<th class="field-{column}">(.*?)</th>', html, re.S)
    ]


def _cells(html: str, column: str) -> list[str]:
    """The text of every cell of one column of an admin table (a changelist or a tabular inline)."""
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(rf'<td class="field-{column}">(.*?)</td>', html, re.S)
    ]


def test_every_review_page_renders_for_the_demo_session(client, admin, demo):
    client.force_login(admin)
    rows = {
        "chat_session": demo,
        "chat_message": demo.messages.first(),
        "chat_contextevent": demo.events.first(),
        "chat_goal": demo.goals.first(),
        "chat_snapshot": demo.snapshots.first(),
        "chat_checkpoint": demo.checkpoints.first(),
        "chat_decision": demo.decisions.first(),
    }
    for name, row in rows.items():
        assert client.get(reverse(f"admin:{name}_changelist")).status_code == 200, name
        assert client.get(reverse(f"admin:{name}_change", args=[row.pk])).status_code == 200, name


def test_the_reliability_score_is_a_rounded_percent_with_its_level(client, admin, demo):
    Session.objects.filter(pk=demo.pk).update(reliability_score=0.13999999999999999)
    client.force_login(admin)
    change = client.get(reverse("admin:chat_session_change", args=[demo.id])).content.decode()
    assert "Critical (14%)" in change
    assert "🔴" not in change
    assert "0.1399" not in change
    changelist = client.get(reverse("admin:chat_session_changelist")).content.decode()
    assert _cells(changelist, "reliability") == ["Critical (14%)"]


def test_retention_is_a_percent_on_a_checkpoint_and_its_revisions(client, admin, demo):
    checkpoint = demo.checkpoints.order_by("number").first()
    Checkpoint.objects.filter(pk=checkpoint.pk).update(retention=2 / 3)
    CheckpointRevision.objects.filter(checkpoint=checkpoint).update(retention=None)
    client.force_login(admin)
    page = client.get(reverse("admin:chat_checkpoint_change", args=[checkpoint.pk])).content.decode()
    assert "67%" in page
    assert "0.666" not in page
    assert set(_cells(page, "retention_percent")) == {"not measured"}


def test_messages_say_whether_they_are_in_the_context(client, admin, demo):
    user_message = demo.messages.filter(role="user").order_by("position").first()
    message_leave_context(message=user_message)
    compressed = demo.messages.filter(compressed_into__isnull=False).order_by("position").first()
    checkpoint = compressed.compressed_into
    client.force_login(admin)

    changelist = reverse("admin:chat_message_changelist")
    states = _cells(client.get(changelist).content.decode(), "context_state")
    assert states.count("history only, not in the context") == 1
    assert f"compressed into checkpoint #{checkpoint.number}, ultra" in states
    assert "compressed into checkpoint #4, level 3 (recent)" in states
    assert "in the active context" in states
    counts = {
        value: len(_cells(client.get(f"{changelist}?context={value}").content.decode(), "context_state"))
        for value in ("active", "compressed", "history")
    }
    assert counts == {
        "active": Message.objects.filter(compressed_into__isnull=True, excluded_from_context=False).count(),
        "compressed": Message.objects.filter(compressed_into__isnull=False).count(),
        "history": 1,
    }
    assert counts["active"] > 0
    assert counts["compressed"] > 0
    history_only = _cells(client.get(f"{changelist}?context=history").content.decode(), "position")
    assert history_only == [str(user_message.position)]

    change = client.get(reverse("admin:chat_message_change", args=[compressed.pk])).content.decode()
    assert f"compressed into checkpoint #{checkpoint.number}, ultra" in change
    session_page = client.get(reverse("admin:chat_session_change", args=[demo.id])).content.decode()
    inline = _cells(session_page, "context_state")
    assert len(inline) == demo.messages.count()
    assert inline[user_message.position - 1] == "history only, not in the context"


def test_events_say_what_happened_in_the_timeline_words_escaped(client, admin, demo):
    event_record(session=demo, type=EventType.COMPRESSION_ERROR, payload={"reason": "<b>model</b> said no"})
    client.force_login(admin)
    changelist = client.get(reverse("admin:chat_contextevent_changelist")).content.decode()
    lines = _cells(changelist, "what_happened")
    assert len(lines) == demo.events.count()
    assert "Compression #1: 7 messages, 1,463 → 784 tokens in context, 0.0 s (truncate)" in lines
    assert "&lt;b&gt;model&lt;/b&gt; said no" in changelist
    assert "<b>model</b>" not in changelist
    aged = demo.events.filter(type="checkpoint-aged").first()
    detail = client.get(reverse("admin:chat_contextevent_change", args=[aged.pk])).content.decode()
    line = "Checkpoint #1 aged from level 3 (recent) → level 2 (old): 410 → 287 tokens; 100% of its facts in the prompt"
    assert line in detail
    session_page = client.get(reverse("admin:chat_session_change", args=[demo.id])).content.decode()
    first = demo.snapshots.order_by("created_at", "id")[0]  # its id depends on the database's sequence
    assert f"Snapshot {first.pk} (1,463 tokens) Before compression 1" in _cells(session_page, "what_happened")


def test_the_session_page_shows_its_goals_decisions_and_snapshots_read_only(client, admin, demo):
    client.force_login(admin)
    page = client.get(reverse("admin:chat_session_change", args=[demo.id])).content.decode()
    goal = Goal.objects.get(session=demo)
    assert _cells(page, "description").count(goal.description) == 1
    assert _cells(page, "next_step") == [goal.next_step]
    decisions = set(Decision.objects.filter(session=demo).values_list("description", flat=True))
    assert decisions <= set(_cells(page, "description"))
    assert _cells(page, "reason")[:2] == ["Before compression 4", "Before the last compression"]
    assert len(_cells(page, "token_count")) == Snapshot.objects.filter(session=demo).count()
    # Nothing on the page can be typed into, ticked for deletion or added.
    assert not re.search(
        r'<(input(?![^>]*type="hidden")|textarea|select)[^>]*name="(goals|decisions|snapshots)-\d', page
    )
    for prefix in ("goals", "decisions", "snapshots"):
        assert f'name="{prefix}-MAX_NUM_FORMS" value="0"' in page, prefix
    snapshot = Snapshot.objects.filter(session=demo).earliest("id")
    assert client.post(reverse("admin:chat_snapshot_change", args=[snapshot.pk]), {"reason": "x"}).status_code == 403
    assert Snapshot.objects.get(pk=snapshot.pk).reason == snapshot.reason


def test_admin_pages_link_a_favicon_that_is_served(client, admin, demo):
    client.force_login(admin)
    icons = set()
    for url in [
        reverse("admin:index"),
        reverse("admin:chat_session_changelist"),
        reverse("admin:chat_session_change", args=[demo.id]),
        reverse("admin:chat_snapshot_changelist"),
        reverse("chat:session_list"),
    ]:
        found = re.findall(r'<link rel="icon" href="([^"]+)"', client.get(url).content.decode())
        assert len(found) == 1, url
        icons.update(found)
    client.logout()
    icons.update(re.findall(r'<link rel="icon" href="([^"]+)"', client.get(reverse("admin:login")).content.decode()))
    assert len(icons) == 1
    href = icons.pop()
    assert href.startswith(settings.STATIC_URL)
    path = href.removeprefix(settings.STATIC_URL)
    # The staticfiles finders, as in development; WhiteNoise serves the same file once collected.
    response = serve(RequestFactory().get(href), path, insecure=True)
    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    assert b"<svg" in b"".join(response)


def test_session_list_needs_login_and_shows_only_own_sessions(client, user, other_user):
    response = client.get(reverse("chat:session_list"))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    session_create(owner=user, model="llama3.2:3b", context_size=8192, title="<script>alert('x')</script>")
    session_create(owner=other_user, model="llama3.2:3b", context_size=8192, title="Bob's secret")
    client.force_login(user)
    page = client.get(reverse("chat:session_list")).content.decode()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<script>alert" not in page
    assert "Bob&#x27;s secret" not in page
    assert "of the context filled" in page


def test_settings_refuse_to_start_without_a_secret_key_unless_debugging(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE"}}
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='ollm_site.settings'; django.setup(); print('ok')"
    # Point the .env lookup elsewhere so a developer's .env cannot supply the key.
    env["PYTHONPATH"] = str(ROOT)
    env["OLLM_ENV_FILE"] = str(tmp_path / "absent.env")
    refused = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert refused.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in refused.stderr
    debugging = subprocess.run(
        [sys.executable, "-c", code], env={**env, "DEBUG": "1"}, cwd=tmp_path, capture_output=True, text=True
    )
    assert debugging.stdout.strip() == "ok", debugging.stderr


def test_embedded_default_needs_no_server():
    from django.conf import settings

    assert settings.DATABASES["default"]["ENGINE"] in {"django.db.backends.sqlite3", "django.db.backends.postgresql"}
    if not os.environ.get("REDIS_URL"):
        assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"
        assert settings.CELERY_TASK_ALWAYS_EAGER
