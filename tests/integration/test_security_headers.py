"""Response headers (issue 22, item 7): a Content-Security-Policy on every page and htmx fragment,
no inline script handlers left in the pages, ``Cache-Control: no-store`` on the page that shows a
new API token and on the REST API, and a token made once per POST (redirect, then shown once)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import ApiToken
from accounts.services import api_token_create
from chat.services.messages import message_create

pytestmark = pytest.mark.django_db

INLINE_HANDLER = re.compile(r"\son[a-z]+=", re.IGNORECASE)
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>\s*\S", re.IGNORECASE)


@pytest.fixture
def browser(user):
    client = Client()
    client.force_login(user)
    return client


def policy(response) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part for part in (p.strip() for p in header.split(";")) if part}


def test_every_page_has_a_strict_script_policy(browser, chat_session):
    message_create(session=chat_session, role="user", content="Hello there")
    pages = [
        reverse("chat:session_list"),
        reverse("chat:chat", args=[chat_session.pk]),
        reverse("chat:session_full_history", args=[chat_session.pk]),
        reverse("accounts:tokens"),
        "/api/docs",
    ]
    for url in pages:
        response = browser.get(url)
        assert response.status_code == 200, url
        directives = policy(response)
        assert directives["script-src"] == "script-src 'self'", url
        assert directives["object-src"] == "object-src 'none'", url
        assert directives["frame-ancestors"] == "frame-ancestors 'none'", url
        assert "ws://testserver" in directives["connect-src"], url
        html = response.content.decode()
        assert not INLINE_HANDLER.search(html), (url, INLINE_HANDLER.search(html))
        assert not INLINE_SCRIPT.search(html), (url, INLINE_SCRIPT.search(html))


def test_the_print_button_is_handled_by_the_static_script(browser, chat_session):
    html = browser.get(reverse("chat:session_full_history", args=[chat_session.pk])).content.decode()
    assert "data-print" in html
    assert "js/anchor.js" in html


def test_an_htmx_fragment_and_the_login_page_have_the_policy(browser, chat_session):
    fragment = browser.get(reverse("chat:context_meter", args=[chat_session.pk]), headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    assert "script-src 'self'" in fragment["Content-Security-Policy"]
    login = Client().get(reverse("login"))
    assert "script-src 'self'" in login["Content-Security-Policy"]


def test_the_api_answers_no_store(user):
    _, raw = api_token_create(user=user, name="t")
    response = Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/sessions")
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert "no-store" in Client().get("/api/sessions")["Cache-Control"]  # the 401 too


def test_downloads_from_the_pages_are_not_stored(browser, chat_session):
    for name in ["chat:session_export", "chat:session_archive"]:
        response = browser.get(reverse(name, args=[chat_session.pk]))
        assert response.status_code == 200, name
        assert response["Content-Disposition"].startswith("attachment")
        assert "no-store" in response["Cache-Control"], name
    assert "no-store" not in browser.get(reverse("chat:chat", args=[chat_session.pk])).get("Cache-Control", "")


def test_the_tokens_page_is_not_stored(browser):
    assert "no-store" in browser.get(reverse("accounts:tokens"))["Cache-Control"]
    assert "no-store" in browser.post(reverse("accounts:tokens"), {"name": "ci"})["Cache-Control"]


def test_a_new_token_redirects_and_is_shown_once(browser, user):
    created = browser.post(reverse("accounts:tokens"), {"name": "laptop"})
    assert created.status_code == 302
    assert created["Location"] == reverse("accounts:tokens")
    assert ApiToken.objects.filter(user=user).count() == 1

    first = browser.get(reverse("accounts:tokens"))
    shown = re.search(r"<pre><code>([\w-]+)</code></pre>", first.content.decode())
    assert shown is not None
    assert "Token <strong>laptop</strong> created" in first.content.decode()
    token = ApiToken.objects.get(user=user)
    assert shown.group(1).startswith(token.prefix)

    again = browser.get(reverse("accounts:tokens")).content.decode()
    assert shown.group(1) not in again
    assert "<pre><code>" not in again
    assert token.prefix in again  # still listed
    assert ApiToken.objects.filter(user=user).count() == 1  # a refresh makes no other token
