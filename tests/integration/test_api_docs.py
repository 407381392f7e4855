"""The API's map (issue 17): every operation says what it does, and /api/docs leads back to the app."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from ollm_site.api import api as ninja_api

pytestmark = pytest.mark.django_db

METHODS = {"get", "post", "put", "patch", "delete"}


def _operations() -> list[dict[str, str]]:
    document = ninja_api.get_openapi_schema()
    return [
        {"where": f"{method.upper()} {path}", **operation}
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if method in METHODS
    ]


def test_every_operation_has_its_own_summary_not_its_function_name():
    operations = _operations()
    assert len(operations) >= 29
    for operation in operations:
        summary = operation.get("summary", "").strip()
        assert summary, operation["where"]
        # ninja's default is the view function's name in title case, and the operation id ends with that name.
        as_function = re.sub(r"\W+", "_", summary.lower()).strip("_")
        assert not operation["operationId"].endswith(as_function), (operation["where"], summary)
        assert not summary.endswith("View"), (operation["where"], summary)
    summaries = [operation["summary"] for operation in operations]
    assert len(set(summaries)) == len(summaries), sorted(s for s in summaries if summaries.count(s) > 1)


def test_the_operations_a_user_reaches_for_first_read_as_actions():
    by_place = {operation["where"]: operation for operation in _operations()}
    assert by_place["POST /api/sessions"]["summary"] == "Start a session"
    assert by_place["DELETE /api/goals/{goal_id}"]["summary"] == "Delete a goal"
    assert by_place["POST /api/snapshots/{snapshot_id}/restore"]["summary"] == "Restore a snapshot"
    assert "whole history" in by_place["DELETE /api/sessions/{session_id}"]["description"]
    assert "undo" in by_place["POST /api/snapshots/{snapshot_id}/restore"]["description"]


def test_the_docs_page_links_back_to_the_app_under_the_strict_policy(client, user):
    client.force_login(user)
    response = client.get("/api/docs")
    assert response.status_code == 200
    html = response.content.decode()
    nav = re.search(r'<nav class="app-nav"[^>]*>(.*?)</nav>', html, re.S)
    assert nav is not None
    assert f'<a href="{reverse("chat:session_list")}">← Back to ollm-site</a>' in nav.group(1)
    assert f'<a href="{reverse("accounts:tokens")}">API tokens</a>' in nav.group(1)
    # The Swagger UI still starts: its settings, its two scripts and its stylesheet, all from /static.
    assert 'id="swagger-settings"' in html
    assert re.findall(r'<script src="([^"]+)"', html) == [
        "/static/ninja/swagger-ui-bundle.js",
        "/static/ninja/swagger-ui-init.js",
    ]
    assert re.findall(r'<link rel="icon" href="([^"]+)"', html) == ["/static/favicon.svg"]
    assert "script-src 'self';" in response["Content-Security-Policy"]
    assert not re.search(r"\son[a-z]+=", html)


@pytest.mark.parametrize("path", ["/api/openapi.json", "/api/docs"])
def test_the_api_map_answers_a_bearer_token_and_nobody_else(client, api_token, path):
    """A script that uses the API with its token may read the API's map; no token, a browser goes to the login
    page; a wrong or revoked token gets 401, as on any other endpoint."""
    with_token = client.get(path, headers={"Authorization": f"Bearer {api_token}"})
    assert with_token.status_code == 200
    if path.endswith(".json"):
        assert "/api/sessions/import" in with_token.json()["paths"]
    else:
        assert 'id="swagger-settings"' in with_token.content.decode()
    anonymous = client.get(path)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(reverse("login") + "?next=")
    for header in (f"Bearer {api_token}x", "Bearer ", f"Basic {api_token}"):
        wrong = client.get(path, headers={"Authorization": header})
        assert wrong.status_code == 401, header
        assert wrong.json() == {"detail": "Unauthorized"}


def test_a_revoked_token_no_longer_reads_the_api_map(client, user):
    from accounts.services import api_token_create, api_token_revoke

    token, raw = api_token_create(user=user, name="script")
    headers = {"Authorization": f"Bearer {raw}"}
    assert client.get("/api/openapi.json", headers=headers).status_code == 200
    api_token_revoke(token=token)
    assert client.get("/api/openapi.json", headers=headers).status_code == 401
