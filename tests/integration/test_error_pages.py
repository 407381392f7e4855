"""The error pages in the site's style (issue 35): a phone renders them at its width (viewport tag),
and production shows them instead of Django's bare pages."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory
from django.views import defaults

from chat.services.sessions import session_create

pytestmark = pytest.mark.django_db

VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'


def looks_like_the_site(html: str) -> None:
    assert VIEWPORT in html
    assert "/static/css/site.css" in html
    assert 'class="topbar"' in html


def test_a_missing_page_answers_404_with_the_sites_template(owner_client):
    response = owner_client.get("/no-such-page/<b>x</b>/")
    assert response.status_code == 404
    assert "404.html" in [template.name for template in response.templates]
    html = response.content.decode()
    looks_like_the_site(html)
    assert "Page not found" in html
    assert "<code>/no-such-page/%3Cb%3Ex%3C/b%3E/</code>" in html, "the address shown, quoted"
    assert "<b>x" not in html
    assert "Log out" in html, "the top bar of a logged-in user"


def test_someone_elses_session_is_the_same_404(owner_client, other_user):
    session = session_create(owner=other_user, model="llama3.2:3b", context_size=4096, title="Theirs")
    response = owner_client.get(f"/sessions/{session.pk}/")
    assert response.status_code == 404
    assert "Page not found" in response.content.decode()


def test_the_500_400_and_403_pages_render_without_a_request_context():
    request = RequestFactory().get("/")
    server_error = defaults.server_error(request)
    assert server_error.status_code == 500
    looks_like_the_site(server_error.content.decode())
    assert "Something went wrong" in server_error.content.decode()
    bad_request = defaults.bad_request(request, Exception("bad"))
    assert bad_request.status_code == 400
    looks_like_the_site(bad_request.content.decode())
    assert "Request not understood" in bad_request.content.decode()
    denied = defaults.permission_denied(request, PermissionDenied())
    assert denied.status_code == 403
    assert "Not allowed" in denied.content.decode()


def test_the_api_docs_have_a_viewport_tag(owner_client):
    response = owner_client.get("/api/docs")
    assert response.status_code == 200
    assert VIEWPORT in response.content.decode()


def test_export_selected_with_nothing_ticked_says_so_on_the_sites_page(owner_client):
    response = owner_client.post("/sessions/export/", {})
    assert response.status_code == 400
    html = response.content.decode()
    looks_like_the_site(html)
    assert "Tick at least one of your sessions" in html
    assert "<h1>Your sessions</h1>" in html  # the list itself, to tick one and export again
