from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from chat.models import Session
from chat.services import session_create
from contextmgr.core.aging import Level
from contextmgr.models import Checkpoint, ContextEvent, Decision, Snapshot

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
    assert "Context: " in changelist.content.decode()
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
    revisions = client.get(reverse("admin:contextmgr_checkpoint_change", args=[oldest.id])).content.decode()
    assert revisions.count('<td class="field-reason">') == 4
    for name in ["goal", "decision", "artifact", "snapshot", "contextevent", "checkpoint"]:
        assert client.get(reverse(f"admin:contextmgr_{name}_changelist")).status_code == 200
    assert client.get(reverse("admin:chat_message_changelist") + "?q=JWT").status_code == 200


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
    assert "Context: " in page


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
