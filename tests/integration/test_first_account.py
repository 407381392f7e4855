"""The first account, made in the browser while no account exists: the administrator, logged in."""

from __future__ import annotations

import contextlib
import io
import threading
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import UserManager
from django.core.management import call_command
from django.db import connection
from django.test import Client

from accounts.services import AccountsExist, first_account_create
from tests.support.timing import scaled

pytestmark = pytest.mark.django_db

FIRST = "/account/first/"
GOOD = {"username": "ada", "password1": "harbour-crane-40t", "password2": "harbour-crane-40t"}


def test_on_an_empty_database_the_home_page_leads_to_the_first_account_form(client):
    response = client.get("/", follow=True)
    assert [url for url, _ in response.redirect_chain] == ["/accounts/login/?next=/", FIRST]
    page = response.content.decode()
    assert "<h1>Create the first account</h1>" in page
    assert 'name="csrfmiddlewaretoken"' in page
    assert 'name="password2"' in page


def test_the_first_account_is_the_administrator_and_is_logged_in(client):
    response = client.post(FIRST, GOOD)
    assert response.status_code == 302
    assert response["Location"] == "/"
    user = get_user_model().objects.get()
    assert (user.username, user.is_staff, user.is_superuser, user.is_active) == ("ada", True, True, True)
    assert user.check_password("harbour-crane-40t")
    sessions = client.get("/")
    assert sessions.status_code == 200
    assert sessions.context["user"] == user
    assert 'name="model"' in sessions.content.decode()  # the new-session form: ready to chat


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({**GOOD, "password2": "harbour-crane-41t"}, "The two password fields didn"),
        ({**GOOD, "password1": "x7", "password2": "x7"}, "This password is too short"),
        ({**GOOD, "password1": "password123", "password2": "password123"}, "This password is too common"),
        ({**GOOD, "password1": "4815162342", "password2": "4815162342"}, "This password is entirely numeric"),
        ({**GOOD, "username": "harbour-crane", "password1": "harbour-crane", "password2": "harbour-crane"}, "similar"),
        ({**GOOD, "username": "a b"}, "Enter a valid username"),
        ({**GOOD, "password2": ""}, "This field is required"),
    ],
)
def test_django_validates_the_username_and_the_password(client, data, error):
    response = client.post(FIRST, data)
    assert response.status_code == 422
    assert error in response.content.decode()
    assert not get_user_model().objects.exists()


def test_once_an_account_exists_the_page_is_gone(client, user):
    """Any account, even one that is not staff: GET and POST both go to the login page, and make nothing."""
    for response in (client.get(FIRST), client.post(FIRST, GOOD)):
        assert response.status_code == 302
        assert response["Location"] == "/accounts/login/"
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["alice"]
    login = client.get("/accounts/login/")
    assert login.status_code == 200
    assert FIRST not in login.content.decode()
    client.force_login(user)
    assert client.post(FIRST, GOOD)["Location"] == "/accounts/login/"
    assert get_user_model().objects.count() == 1


def test_an_account_made_between_the_check_and_the_create_sends_to_the_login(client, user, monkeypatch):
    monkeypatch.setattr("accounts.views.accounts_exist", lambda: False)
    response = client.post(FIRST, GOOD)
    assert (response.status_code, response["Location"]) == (302, "/accounts/login/")
    assert get_user_model().objects.count() == 1
    assert "_auth_user_id" not in client.session


def test_the_form_needs_the_csrf_token():
    client = Client(enforce_csrf_checks=True)
    assert client.post(FIRST, GOOD).status_code == 403
    assert not get_user_model().objects.exists()
    client.get(FIRST)
    with_token = client.post(FIRST, {**GOOD, "csrfmiddlewaretoken": client.cookies["csrftoken"].value})
    assert with_token.status_code == 302
    assert get_user_model().objects.get().is_superuser


def test_the_service_refuses_once_any_account_exists(user):
    with pytest.raises(AccountsExist):
        first_account_create(username="ada", password="harbour-crane-40t")
    assert get_user_model().objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_first_accounts_at_once_make_one_administrator(monkeypatch):
    """Two requests pass the page's check together. Each waits, past the service's own check, for
    the other to get there too: without the lock both would and both would create; with it the
    second is held before its check, the first goes on alone once its wait times out, and the
    second then finds the account."""
    met = threading.Barrier(2, timeout=scaled(2))
    create = UserManager.create_superuser

    def create_when_both_checked(self: UserManager[Any], *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):  # the other is held back: the lock works
            met.wait()
        return create(self, *args, **kwargs)

    monkeypatch.setattr(UserManager, "create_superuser", create_when_both_checked)
    start = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def attempt(username: str) -> None:
        start.wait()
        try:
            first_account_create(username=username, password="harbour-crane-40t")
            outcomes[username] = "created"
        except AccountsExist:
            outcomes[username] = "refused"
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(name,)) for name in ("ada", "grace")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scaled(60))
    assert sorted(outcomes.values()) == ["created", "refused"]
    admins = list(get_user_model().objects.values_list("username", "is_superuser"))
    assert len(admins) == 1
    assert admins[0][1] is True


def test_the_start_message_says_where_to_make_the_first_account(django_user_model):
    def said() -> str:
        out = io.StringIO()
        call_command("first_run", url="http://127.0.0.1:8765/", stdout=out)
        return out.getvalue()

    assert "No account yet: open http://127.0.0.1:8765/ and create the first one" in said()
    django_user_model.objects.create_user(username="alice", password="pw-alice-123")
    assert "No admin account yet" in said()
    assert "make admin" in said()
    django_user_model.objects.create_superuser(username="root", password="pw-root-123", email="")
    assert "account yet" not in said()
