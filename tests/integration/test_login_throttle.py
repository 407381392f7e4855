"""Brute-force protection on login (issue 22, item 1): django-axes, configured in the settings.

After ``AXES_FAILURE_LIMIT`` failed logins for a username from one client address, that username is
refused from that address, even with the right password, until ``AXES_COOLOFF_TIME`` has passed since
the last counted failure; after ``OLLM_LOGIN_USERNAME_FAILURE_LIMIT`` from any addresses, from everywhere
(issue 49, item 1). An address is never locked for accounts it has not failed against: behind a proxy
everyone shares one. The login page says when to try again. The admin login is the same.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db

LIMIT = settings.AXES_FAILURE_LIMIT
USERNAME_LIMIT = settings.OLLM_LOGIN_USERNAME_FAILURE_LIMIT
LOGIN, ADMIN_LOGIN = "/accounts/login/", "/admin/login/"


def attempt(url: str, username: str, password: str, address: str = "10.0.0.1") -> Any:
    return Client(REMOTE_ADDR=address).post(url, {"username": username, "password": password})


def fail(url: str, username: str, times: int, address: str = "10.0.0.1") -> None:
    for _ in range(times):
        assert attempt(url, username, "wrong-password", address).status_code in (200, 429)


def pass_the_lock() -> None:
    """Time travel: every counted failure happened a cool-off time (and a second) ago."""
    for row in AccessAttempt.objects.all():
        row.attempt_time -= settings.AXES_COOLOFF_TIME + timedelta(seconds=1)
        row.save(update_fields=["attempt_time"])


def test_the_settings_lock_after_five_failures_for_fifteen_minutes():
    assert LIMIT == 5
    assert USERNAME_LIMIT == 20
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 15 * 60
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"], "username"]


def test_the_right_password_is_refused_after_too_many_failures_until_the_lock_expires(user):
    fail(LOGIN, "alice", LIMIT - 1)
    assert attempt(LOGIN, "alice", "wrong-password").status_code == 429  # the failure that locks
    refused = attempt(LOGIN, "alice", "pw-alice-123")
    assert refused.status_code == 429
    assert "_auth_user_id" not in refused.client.session
    page = refused.content.decode()
    assert "Too many failed login attempts; try again in 15 minutes." in page
    assert '<form method="post"' in page

    pass_the_lock()
    logged_in = attempt(LOGIN, "alice", "pw-alice-123")
    assert logged_in.status_code == 302
    assert logged_in.client.session["_auth_user_id"] == str(user.pk)


def test_the_message_counts_the_minutes_left(user):
    fail(LOGIN, "alice", LIMIT)
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=10))
    assert "try again in 5 minutes." in attempt(LOGIN, "alice", "pw-alice-123").content.decode()


def test_failures_below_the_limit_do_not_lock_and_a_success_resets_them(user):
    fail(LOGIN, "alice", LIMIT - 1)
    assert attempt(LOGIN, "alice", "pw-alice-123").status_code == 302
    fail(LOGIN, "alice", LIMIT - 1)
    assert attempt(LOGIN, "alice", "pw-alice-123").status_code == 302


def test_the_lock_is_per_username_and_address(user, other_user):
    fail(LOGIN, "alice", LIMIT, address="10.0.0.1")
    assert attempt(LOGIN, "alice", "pw-alice-123", address="10.0.0.1").status_code == 429
    # Another user from another address: not affected.
    assert attempt(LOGIN, "bob", "pw-bob-123", address="10.0.0.2").status_code == 302
    # Another user from the locked pair's address: not affected either (behind a proxy, everyone's).
    assert attempt(LOGIN, "bob", "pw-bob-123", address="10.0.0.1").status_code == 302
    # The locked username from another address: below its own limit across addresses.
    assert attempt(LOGIN, "alice", "pw-alice-123", address="10.0.0.3").status_code == 302


def test_a_stranger_failing_fifty_times_does_not_stop_alice_on_the_same_address(user):
    for number in range(50):
        attempt(LOGIN, f"guess-{number % 7}", "wrong-password", address="10.0.0.9")
    assert attempt(LOGIN, "guess-0", "wrong-password", address="10.0.0.9").status_code == 429  # the stranger is
    logged_in = attempt(LOGIN, "alice", "pw-alice-123", address="10.0.0.9")
    assert logged_in.status_code == 302
    assert logged_in.client.session["_auth_user_id"] == str(user.pk)


def test_alices_own_failures_still_lock_alice(user):
    fail(LOGIN, "alice", LIMIT, address="10.0.0.9")
    refused = attempt(LOGIN, "alice", "pw-alice-123", address="10.0.0.9")
    assert refused.status_code == 429
    assert "Too many failed login attempts; try again in 15 minutes." in refused.content.decode()


def test_one_username_guessed_from_many_addresses_locks_at_the_higher_limit(user):
    for number in range(USERNAME_LIMIT - 1):
        attempt(LOGIN, "alice", "wrong-password", address=f"10.1.0.{number}")
    assert attempt(LOGIN, "alice", "pw-alice-123", address="10.2.0.1").status_code == 302
    for number in range(USERNAME_LIMIT):
        attempt(LOGIN, "alice", "wrong-password", address=f"10.1.1.{number}")
    refused = attempt(LOGIN, "alice", "pw-alice-123", address="10.2.0.2")
    assert refused.status_code == 429
    assert "try again in 15 minutes." in refused.content.decode()
    pass_the_lock()
    assert attempt(LOGIN, "alice", "pw-alice-123", address="10.2.0.2").status_code == 302


def test_the_admin_login_is_throttled_too(django_user_model):
    django_user_model.objects.create_superuser(username="root", password="pw-root-123")
    fail(ADMIN_LOGIN, "root", LIMIT)
    refused = attempt(ADMIN_LOGIN, "root", "pw-root-123")
    assert refused.status_code == 429
    assert "Too many failed login attempts" in refused.content.decode()
    # Failures at the admin lock the app's login as well: one count per username and address.
    assert attempt(LOGIN, "root", "pw-root-123").status_code == 429
    assert attempt(LOGIN, "root", "pw-root-123", address="10.0.0.4").status_code == 302
    pass_the_lock()
    assert attempt(ADMIN_LOGIN, "root", "pw-root-123").status_code == 302


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(user, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

    def through_proxy(username: str, password: str, client: str) -> Any:
        return Client(REMOTE_ADDR="172.16.0.1").post(
            LOGIN, {"username": username, "password": password}, headers={"X-Forwarded-For": client}
        )

    for _ in range(LIMIT):
        through_proxy("alice", "no", "1.2.3.4, 10.9.9.9")
    assert AccessAttempt.objects.filter(ip_address="10.9.9.9").exists()
    # alice from the client the proxy named is locked; alice from another client behind it is not.
    assert through_proxy("alice", "pw-alice-123", "10.9.9.9").status_code == 429
    assert through_proxy("alice", "pw-alice-123", "10.9.9.8").status_code == 302


def test_api_tokens_keep_working_for_a_locked_username_and_address(user, api_token):
    fail(LOGIN, "alice", LIMIT, address="10.0.0.5")
    assert attempt(LOGIN, "alice", "pw-alice-123", address="10.0.0.5").status_code == 429
    response = Client(REMOTE_ADDR="10.0.0.5", headers={"Authorization": f"Bearer {api_token}"}).get(
        "/api/context-sizes"
    )
    assert response.status_code == 200
    assert response.json()[0]["size"] > 0
