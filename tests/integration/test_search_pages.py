"""The search page, the API, the full history page, zip exports and the admin search, on either engine."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.goals import decision_record
from chat.services.messages import message_create
from chat.services.sessions import session_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def sessions(user, other_user):
    auth = session_create(owner=user, model="llama3.2:3b", context_size=16384, title="Auth <work>")
    message_create(session=auth, role="user", content="Fix the login bug in src/auth/login.ts")
    reply = message_create(session=auth, role="assistant", content="I rewrote the <b>login</b> handler.")
    compression_commit(session=auth, message_ids=[reply.id], draft=CheckpointDraft(summary="Rewrote the handler."))
    decision_record(session=auth, description="Keep the login form server-rendered", locked=True)
    notes = session_create(owner=user, model="embedded/smollm2-135m", context_size=4096, title="Notes")
    message_create(session=notes, role="user", content="nothing about that here, only gardening")
    secret = session_create(owner=other_user, model="llama3.2:3b", context_size=16384, title="Bob's plans")
    message_create(session=secret, role="user", content="Bob's login secret is hunter2")
    return {"auth": auth, "reply": reply, "notes": notes, "secret": secret}


def test_pages_need_a_login(client, sessions):
    for url in (
        reverse("search:search") + "?q=login",
        reverse("search:export") + "?q=login",
        reverse("chat:session_full_history", args=[sessions["auth"].id]),
    ):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login"))
    assert client.post(reverse("chat:sessions_export"), {"session": [sessions["auth"].id]}).status_code == 302


def test_the_search_box_is_on_every_page(client, user, sessions):
    client.force_login(user)
    for url in (reverse("chat:session_list"), reverse("chat:chat", args=[sessions["auth"].id])):
        html = client.get(url).content.decode()
        assert f'action="{reverse("search:search")}"' in html
        assert 'name="q"' in html


def test_the_search_page_groups_highlights_and_links(client, user, sessions):
    client.force_login(user)
    auth, reply = sessions["auth"], sessions["reply"]
    response = client.get(reverse("search:search"), {"q": "login"})
    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="result-session-{auth.id}"' in html
    assert "Auth &lt;work&gt;" in html
    assert f'href="/sessions/{auth.id}/#msg-{reply.id}"' in html
    assert "&lt;b&gt;<mark>login</mark>&lt;/b&gt;" in html
    assert "<b>login</b>" not in html
    assert "3 matches" in html
    assert "hunter2" not in html
    assert "Bob" not in html
    assert str(sessions["secret"].id) not in html
    # The compressed message opens from its anchor: the chat page has it inside its <details>.
    chat = client.get(f"/sessions/{auth.id}/").content.decode()
    details = chat.index('<details class="compressed"')
    assert details < chat.index(f'id="msg-{reply.id}"') < chat.index("</details>", details)
    assert "js/anchor.js" in chat


def test_the_search_page_filters_and_survives_hostile_input(client, user, sessions):
    client.force_login(user)
    response = client.get(reverse("search:search"), {"q": "login", "only": "locked"})
    assert "1 match" in response.content.decode()
    assert "icon-lock" in response.content.decode()  # an inline SVG, not an emoji that needs a font
    assert "locked</a>" in response.content.decode()
    response = client.get(reverse("search:search"), {"q": "login", "role": "assistant", "model": "llama3.2:3b"})
    assert "1 match" in response.content.decode()
    for query in ['"', "((", "a" * 10_000, "NEAR(x", "-", "\x00"]:
        response = client.get(reverse("search:search"), {"q": query, "since": "not a date", "role": "wizard"})
        assert response.status_code == 200
    response = client.get(reverse("search:search"), {"q": "x", "page": "-3"})
    assert response.status_code == 200


def test_the_chat_page_shows_a_message_outside_the_latest_window(client, user, chat_session):
    first = message_create(session=chat_session, role="user", content="the very first zebra")
    for i in range(300):
        message_create(session=chat_session, role="assistant", content=f"filler {i}")
    client.force_login(user)
    latest = client.get(reverse("chat:chat", args=[chat_session.id])).content.decode()
    assert f'id="msg-{first.id}"' not in latest
    around = client.get(reverse("chat:chat", args=[chat_session.id]), {"around": first.id}).content.decode()
    assert f'id="msg-{first.id}"' in around
    assert 'id="history-later"' in around


def test_the_full_history_page(client, user, other_user, sessions):
    auth, reply = sessions["auth"], sessions["reply"]
    for i in range(310):
        message_create(session=auth, role="user", content=f"line {i}")
    client.force_login(user)
    response = client.get(reverse("chat:session_full_history", args=[auth.id]))
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('class="msg msg-') == 312
    assert f'id="msg-{reply.id}"' in html
    assert "compressed into checkpoint #1, level 3 (recent)" in html
    assert html.count("in the active context") == 311
    assert "@media print" not in html  # printing is the stylesheet's job
    assert html.index("line 0") < html.index("line 309")
    assert "&lt;b&gt;login&lt;/b&gt;" in html
    client.force_login(other_user)
    assert client.get(reverse("chat:session_full_history", args=[auth.id])).status_code == 404


def _zip_names(response):
    assert response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(
        io.BytesIO(b"".join(response.streaming_content) if response.streaming else response.content)
    )
    return {name: json.loads(archive.read(name)) for name in archive.namelist()}


def test_export_the_selected_sessions_as_a_zip(client, user, sessions):
    client.force_login(user)
    auth, notes, secret = sessions["auth"], sessions["notes"], sessions["secret"]
    response = client.post(
        reverse("chat:sessions_export"), {"session": [str(auth.id), str(notes.id), str(secret.id), "junk"]}
    )
    files = _zip_names(response)
    assert set(files) == {f"{auth.id}.json", f"{notes.id}.json"}
    assert [m["parts"][0]["text"] for m in files[f"{auth.id}.json"]["messages"]][
        1
    ] == "I rewrote the <b>login</b> handler."
    # Nothing of the user's own ticked: the list again, saying what to do, with the user's sessions still there.
    refused = client.post(reverse("chat:sessions_export"), {"session": [str(secret.id)]})
    assert refused.status_code == 400
    assert refused["Content-Type"].startswith("text/html")
    assert "Tick at least one of your sessions to export." in refused.content.decode()
    assert f'value="{auth.id}" form="bulk-export"' in refused.content.decode()
    assert "no-store" in response["Cache-Control"]  # a download stays out of shared caches
    html = client.get(reverse("chat:session_list")).content.decode()
    assert f'name="session" value="{auth.id}" form="bulk-export"' in html


def test_export_every_session_matching_a_search(client, user, sessions):
    client.force_login(user)
    files = _zip_names(client.get(reverse("search:export"), {"q": "login"}))
    assert set(files) == {f"{sessions['auth'].id}.json"}
    files = _zip_names(client.get(reverse("search:export"), {"q": "gardening OR login"}))
    assert set(files) == {f"{sessions['auth'].id}.json", f"{sessions['notes'].id}.json"}


def test_export_sessions_command_takes_the_same_filters(tmp_path, sessions):
    call_command("export_sessions", dir=str(tmp_path / "all"), query="login")
    assert {p.name for p in (tmp_path / "all").iterdir()} == {
        f"{sessions['auth'].id}.json",
        f"{sessions['secret'].id}.json",
    }
    call_command("export_sessions", dir=str(tmp_path / "alice"), query="login", user="alice")
    assert {p.name for p in (tmp_path / "alice").iterdir()} == {f"{sessions['auth'].id}.json"}
    call_command("export_sessions", zip=str(tmp_path / "out.zip"), model="embedded/smollm2-135m")
    assert zipfile.ZipFile(tmp_path / "out.zip").namelist() == [f"{sessions['notes'].id}.json"]
    call_command("export_sessions", dir=str(tmp_path / "locked"), query="login", locked=True)
    assert {p.name for p in (tmp_path / "locked").iterdir()} == {f"{sessions['auth'].id}.json"}


def test_admin_session_search_uses_the_full_text_search(client, django_user_model, sessions):
    admin = django_user_model.objects.create_superuser(username="root", password="pw-root-123", email="r@example.com")
    client.force_login(admin)
    url = reverse("admin:chat_session_changelist")
    html = client.get(url, {"q": "handler"}).content.decode()
    assert str(sessions["auth"].id) in html
    assert str(sessions["secret"].id) not in html
    html = client.get(url, {"q": "hunter2"}).content.decode()
    assert str(sessions["secret"].id) in html
    assert str(sessions["auth"].id) not in html
    html = client.get(url, {"q": "Notes"}).content.decode()  # the title search still works
    assert str(sessions["notes"].id) in html
    assert client.get(url, {"q": '"(('}).status_code == 200


def test_the_search_api(client, user, other_user, sessions):
    assert client.get("/api/search", {"q": "login"}).status_code == 401
    client.force_login(user)
    response = client.get("/api/search", {"q": "login", "page_size": 2})
    assert response.status_code == 200
    data = response.json()
    assert (data["total"], data["num_pages"], len(data["results"])) == (3, 2, 2)
    page2 = client.get("/api/search", {"q": "login", "page_size": 2, "page": 2}).json()
    assert len(page2["results"]) == 1
    ids = {(r["kind"], r["id"]) for r in data["results"]} | {(r["kind"], r["id"]) for r in page2["results"]}
    assert len(ids) == 3
    assert all(r["session"] == str(sessions["auth"].id) for r in data["results"] + page2["results"])
    only = client.get("/api/search", {"q": "login", "role": "assistant", "session": str(sessions["auth"].id)}).json()
    assert [(r["kind"], r["role"], r["id"]) for r in only["results"]] == [
        ("message", "assistant", sessions["reply"].id)
    ]
    assert "&lt;b&gt;<mark>login</mark>&lt;/b&gt;" in only["results"][0]["snippet"]
    assert client.get("/api/search", {"q": "login", "model": "embedded/smollm2-135m"}).json()["total"] == 0
    assert client.get("/api/search", {"q": "login", "since": "2000-01-01", "until": "2000-01-02"}).json()["total"] == 0
    assert client.get("/api/search", {"q": "login", "session": str(sessions["secret"].id)}).json()["total"] == 0
    assert client.get("/api/search", {"q": '"(( NEAR *', "page": 1}).status_code == 200
    assert client.get("/api/search", {"q": '"(( NEAR *' + "x" * 10_240}).status_code == 200
    assert client.get("/api/search", {"q": "login", "role": "wizard"}).status_code == 422
    assert client.get("/api/search", {"q": "login", "since": "yesterday"}).status_code == 422
    client.force_login(other_user)
    mine = client.get("/api/search", {"q": "login"}).json()
    assert [r["session"] for r in mine["results"]] == [str(sessions["secret"].id)]


def test_the_search_api_answers_token_clients_as_their_owner(user, other_user, sessions):
    from accounts.services import api_token_create

    token = api_token_create(user=user, name="search")[1]
    client = Client(headers={"Authorization": f"Bearer {token}"})
    data = client.get("/api/search", {"q": "login"}).json()
    assert data["total"] == 3
    assert {r["session"] for r in data["results"]} == {str(sessions["auth"].id)}
    bob = Client(headers={"Authorization": f"Bearer {api_token_create(user=other_user, name='bob')[1]}"})
    assert [r["session"] for r in bob.get("/api/search", {"q": "login"}).json()["results"]] == [
        str(sessions["secret"].id)
    ]


def test_absurd_page_numbers_are_refused_or_clamped_never_a_500(client, user, sessions):
    client.force_login(user)
    assert client.get("/api/search", {"q": "login", "page": 10**20}).status_code == 422
    assert client.get("/search/", {"q": "login", "page": 10**20}).status_code == 200
    from search.selectors import search_history

    assert search_history(user=user, query="login", page=10**20).hits  # the last page, not an overflow


def test_a_capped_search_says_so_on_the_page_and_in_the_api(client, user, sessions, monkeypatch):
    client.force_login(user)
    monkeypatch.setattr("search.selectors.MATCH_CAP", 2)  # Alice has 3 matches for "login"
    html = client.get(reverse("search:search"), {"q": "login"}).content.decode()
    assert "2+ matches · only the newest 2 are ranked" in html
    assert "3 matches" not in html
    data = client.get("/api/search", {"q": "login"}).json()
    assert (data["total"], data["total_is_capped"], data["num_pages"]) == (2, True, 1)
    # The newest two: the assistant's reply and the decision recorded after it, not the first message.
    assert sorted((r["kind"], r["id"] if r["kind"] == "message" else 0) for r in data["results"]) == [
        ("decision", 0),
        ("message", sessions["reply"].id),
    ]
    monkeypatch.setattr("search.selectors.MATCH_CAP", 3)
    html = client.get(reverse("search:search"), {"q": "login"}).content.decode()
    assert "3 matches ·" in html
    assert "+ matches" not in html
    assert client.get("/api/search", {"q": "login"}).json()["total_is_capped"] is False


@pytest.mark.parametrize("day", ["0001-01-01", "9999-12-31"])
def test_the_first_and_last_days_a_date_can_hold_filter_without_a_500(client, user, sessions, day):
    # 9999-12-31 has no day after it: as "until" it sets no bound, so everything matches.
    client.force_login(user)
    expected = 3 if day == "9999-12-31" else 0
    assert client.get("/api/search", {"q": "login", "until": day}).json()["total"] == expected
    assert client.get("/api/search", {"q": "login", "since": day}).json()["total"] == 3 - expected
    for page in ("/search/", "/search/export/"):
        assert client.get(page, {"q": "login", "until": day}).status_code == 200
        assert client.get(page, {"q": "login", "since": day}).status_code == 200
