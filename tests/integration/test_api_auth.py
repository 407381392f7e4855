"""Who may call the API: tokens (command, page, revocation), the session cookie with CSRF, and ownership."""

from __future__ import annotations

import hashlib
import io
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from accounts.models import ApiToken
from accounts.services import api_token_create, api_token_revoke
from chat.models import ClientTask, Session, Snapshot
from chat.services.goals import decision_record, goal_checkpoint_set, goal_create
from chat.services.messages import message_create
from chat.services.sessions import session_create
from chat.services.snapshots import snapshot_create

pytestmark = pytest.mark.django_db


def test_create_api_token_prints_the_token_once_and_stores_only_its_hash(user):
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "alice", name="ci script", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    token = ApiToken.objects.get(user=user)
    assert token.name == "ci script"
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in token.token_hash
    assert token.prefix == raw[:8]
    assert "not shown again" in err.getvalue()
    response = Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/context-sizes")
    assert response.status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_token_records_its_last_use_at_most_once_a_minute(user):
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from accounts.services import LAST_USED_PRECISION, api_token_authenticate

    token, raw = api_token_create(user=user, name="script")
    assert api_token_authenticate(raw=raw) == user
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as queries:
        assert api_token_authenticate(raw=raw) == user
    assert [q["sql"] for q in queries if q["sql"].startswith("UPDATE")] == []
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - LAST_USED_PRECISION - timedelta(seconds=1))
    api_token_authenticate(raw=raw)
    later = ApiToken.objects.get(pk=token.pk).last_used_at
    assert later is not None
    assert later > first


def test_create_api_token_refuses_unknown_users(db):
    with pytest.raises(CommandError, match="There is no user 'nobody'"):
        call_command("create_api_token", "nobody")


def test_without_credentials_every_endpoint_answers_401(client, chat_session):
    for method, path in [
        ("get", "/api/models"),
        ("get", "/api/sessions"),
        ("post", "/api/sessions"),
        ("get", f"/api/sessions/{chat_session.id}"),
        ("delete", f"/api/sessions/{chat_session.id}"),
        ("post", f"/api/sessions/{chat_session.id}/messages"),
        ("get", f"/api/sessions/{chat_session.id}/context"),
        ("patch", "/api/goals/1"),
        ("post", "/api/snapshots/1/restore"),
        ("post", "/api/sessions/import"),
    ]:
        response = getattr(client, method)(path, content_type="application/json")
        assert response.status_code == 401, (method, path)
        assert response.json() == {"detail": "Unauthorized"}
    assert Session.objects.filter(pk=chat_session.pk).exists()


def test_a_wrong_or_revoked_token_answers_401(user, chat_session):
    token, raw = api_token_create(user=user, name="old")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    assert client.get(f"/api/sessions/{chat_session.id}").status_code == 200
    api_token_revoke(token=token)
    assert client.get(f"/api/sessions/{chat_session.id}").status_code == 401
    assert client.delete(f"/api/sessions/{chat_session.id}").status_code == 401
    assert Session.objects.filter(pk=chat_session.pk).exists()
    forged = Client(headers={"Authorization": "Bearer " + raw[:-1] + ("A" if raw[-1] != "A" else "B")})
    assert forged.get("/api/sessions").status_code == 401
    assert Client(headers={"Authorization": f"Basic {raw}"}).get("/api/sessions").status_code == 401


def test_a_token_of_an_inactive_user_answers_401(user):
    _, raw = api_token_create(user=user, name="t")
    user.is_active = False
    user.save()
    assert Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/sessions").status_code == 401


def test_cookie_clients_need_the_csrf_token_for_unsafe_requests(user, api_gateway):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get("/api/sessions").status_code == 200
    payload = {"model": "llama3.2:3b", "context_size": 8192}
    refused = client.post("/api/sessions", payload, content_type="application/json")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "CSRF check Failed"}
    assert not Session.objects.exists()

    page = client.get("/account/tokens/")
    csrf = page.cookies["csrftoken"].value
    accepted = client.post("/api/sessions", payload, content_type="application/json", headers={"X-CSRFToken": csrf})
    assert accepted.status_code == 201
    session_id = accepted.json()["id"]
    assert client.delete(f"/api/sessions/{session_id}").status_code == 403
    assert client.delete(f"/api/sessions/{session_id}", headers={"X-CSRFToken": csrf}).status_code == 204
    assert not Session.objects.exists()


def test_token_clients_need_no_csrf_token(api):
    response = api.post(
        "/api/sessions", {"model": "llama3.2:3b", "context_size": 8192}, content_type="application/json"
    )
    assert response.status_code == 201


def _objects_of(user):
    session = session_create(owner=user, model="llama3.2:3b", context_size=16384)
    message_create(session=session, role="user", content="hello")
    goal = goal_create(session=session, description="Ship it")
    return {
        "session": session,
        "goal": goal,
        "goal_checkpoint": goal_checkpoint_set(goal=goal, description="Write tests"),
        "decision": decision_record(session=session, description="Use SQLite", goal=goal),
        "snapshot": snapshot_create(session=session, kind=Snapshot.Kind.MANUAL),
    }


def test_other_users_objects_answer_404_and_stay_unchanged(api, other_user):
    theirs = _objects_of(other_user)
    s, g = theirs["session"].id, theirs["goal"].id
    requests = [
        ("get", f"/api/sessions/{s}", None),
        ("patch", f"/api/sessions/{s}", {"title": "mine now"}),
        ("delete", f"/api/sessions/{s}", None),
        ("get", f"/api/sessions/{s}/messages", None),
        ("post", f"/api/sessions/{s}/messages", {"content": "hi"}),
        ("get", f"/api/sessions/{s}/context", None),
        ("get", f"/api/sessions/{s}/prompt", None),
        ("post", f"/api/sessions/{s}/compress?wait=true", None),
        ("get", f"/api/sessions/{s}/checkpoints", None),
        ("get", f"/api/sessions/{s}/goals", None),
        ("post", f"/api/sessions/{s}/goals", {"description": "x"}),
        ("patch", f"/api/goals/{g}", {"description": "x"}),
        ("delete", f"/api/goals/{g}", None),
        ("post", f"/api/goals/{g}/checkpoints", {"description": "x"}),
        ("patch", f"/api/goal-checkpoints/{theirs['goal_checkpoint'].id}", {"status": "completed"}),
        ("post", f"/api/goals/{g}/decisions", {"description": "x"}),
        ("patch", f"/api/decisions/{theirs['decision'].id}", {"locked": True}),
        ("post", f"/api/goals/{g}/artifacts", {"path": "a.py", "action": "created"}),
        ("get", f"/api/sessions/{s}/snapshots", None),
        ("post", f"/api/sessions/{s}/snapshots", {}),
        ("post", f"/api/snapshots/{theirs['snapshot'].id}/restore", None),
        ("get", f"/api/sessions/{s}/events", None),
        ("get", f"/api/sessions/{s}/export", None),
    ]
    for method, path, body in requests:
        kwargs = {"content_type": "application/json"} if body is not None else {}
        response = getattr(api, method)(path, body, **kwargs) if body is not None else getattr(api, method)(path)
        assert response.status_code == 404, (method, path, response.content)
        assert response.json()["detail"].startswith("Not Found")
    session = Session.objects.get(pk=s)
    assert session.title != "mine now"
    assert session.messages.count() == 1
    assert session.goals.get().description == "Ship it"
    assert session.snapshots.count() == 1
    assert api.get("/api/sessions").json() == {"items": [], "count": 0}


def test_the_tokens_page_creates_lists_and_revokes_tokens(client, user, other_user):
    assert client.get("/account/tokens/").status_code == 302
    client.force_login(user)
    created = client.post("/account/tokens/", {"name": "laptop"}, follow=True)
    assert created.redirect_chain == [("/account/tokens/", 302)]
    assert created.templates[0].name == "accounts/tokens.html"
    shown = re.search(r"<pre><code>([\w-]+)</code></pre>", created.content.decode())
    assert shown is not None
    raw = shown.group(1)
    token = ApiToken.objects.get(user=user)
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    page = client.get("/account/tokens/").content.decode()
    assert "laptop" in page
    assert raw not in page
    assert token.prefix in page

    theirs, _ = api_token_create(user=other_user, name="bob's")
    assert client.post(f"/account/tokens/{theirs.id}/revoke/").status_code == 404
    assert client.post(f"/account/tokens/{token.id}/revoke/").status_code == 302
    token.refresh_from_db()
    theirs.refresh_from_db()
    assert token.revoked_at is not None
    assert theirs.revoked_at is None
    assert Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/sessions").status_code == 401
    assert "revoked" in client.get("/account/tokens/").content.decode()


def test_the_tokens_page_refuses_an_empty_name(client, user):
    client.force_login(user)
    response = client.post("/account/tokens/", {"name": "   "})
    assert response.status_code == 422
    assert "Name the token" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_the_docs_are_for_logged_in_users_and_served_without_a_cdn(client, user):
    assert client.get("/api/docs").status_code == 302
    assert client.get("/api/openapi.json").status_code == 302
    client.force_login(user)
    docs = client.get("/api/docs")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "/static/ninja/swagger-ui" in html
    assert "cdn.jsdelivr" not in html
    assert "unpkg.com" not in html
    schema = client.get("/api/openapi.json").json()
    assert {"/api/sessions", "/api/sessions/import", "/api/goals/{goal_id}"} <= set(schema["paths"])
    assert set(schema["components"]["securitySchemes"]) == {"TokenAuth", "CookieAuth"}


def _every_operation(ids):
    """(method, path) of every operation in the OpenAPI document, with ids filled in."""
    from ollm_site.api import api as ninja_api

    for template, operations in ninja_api.get_openapi_schema()["paths"].items():
        path = template
        for name, value in ids.items():
            path = path.replace("{" + name + "}", str(value))
        for method in operations:
            yield method, path


def test_every_operation_refuses_missing_and_revoked_credentials_and_cookies_without_csrf(user, api_gateway):
    objects = _objects_of(user)
    ids = {
        "session_id": objects["session"].id,
        "goal_id": objects["goal"].id,
        "checkpoint_id": objects["goal_checkpoint"].id,
        "decision_id": objects["decision"].id,
        "snapshot_id": objects["snapshot"].id,
    }
    token, raw = api_token_create(user=user, name="revoked")
    api_token_revoke(token=token)
    anonymous, revoked = Client(), Client(headers={"Authorization": f"Bearer {raw}"})
    cookie = Client(enforce_csrf_checks=True)
    cookie.force_login(user)
    operations = list(_every_operation(ids))
    assert len(operations) >= 28
    for method, path in operations:
        for client in (anonymous, revoked):
            response = getattr(client, method)(path, {}, content_type="application/json")
            assert response.status_code == 401, (method, path)
        if method != "get":
            response = getattr(cookie, method)(path, {}, content_type="application/json")
            assert response.status_code == 403, (method, path)
            assert response.json() == {"detail": "CSRF check Failed"}
    assert Session.objects.filter(pk=objects["session"].pk).exists()
    assert objects["session"].messages.count() == 1


def test_the_tokens_page_lists_the_users_own_background_tasks_escaped(user, other_user):
    """The table is chat's (a template tag) on accounts' page: the user's tasks, escaped, never another's."""

    token = api_token_create(user=user, name="open-webui")[0]
    ClientTask.objects.create(
        owner=user,
        token=token,
        client="Open WebUI",
        kind="title",
        model="m",
        prompt="p",
        response="<b>Trip to Lyon</b>",
        prompt_tokens=12,
        completion_tokens=4,
    )
    ClientTask.objects.create(
        owner=other_user, client="bob's client", kind="tags", model="m", prompt="p", response="secret"
    )
    client = Client()
    client.force_login(user)

    page = client.get("/account/tokens/").content.decode()

    assert 'id="background-tasks"' in page
    assert "&lt;b&gt;Trip to Lyon&lt;/b&gt;" in page
    assert "<b>Trip to Lyon</b>" not in page
    assert "12 → 4" in page
    assert "open-webui" in page
    assert "secret" not in page
    assert "bob&#x27;s client" not in page
