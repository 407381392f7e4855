"""The production path: /health, the https settings and `check --deploy`."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import OperationalError
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def django_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment for manage.py in a subprocess: no developer .env, no DEBUG, a temp SQLite file."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OLLM_", "SECURE_", "DJANGO_"))
        and k not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL", "CSRF_TRUSTED_ORIGINS"}
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "ollm_site.settings",
            "OLLM_ENV_FILE": str(tmp_path / "absent.env"),
            "SECRET_KEY": secrets.token_urlsafe(50),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra)
    return env


PRODUCTION = {"ALLOWED_HOSTS": "ollm.example.org", "OLLM_HTTPS": "1", "SECURE_HSTS_PRELOAD": "1"}


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_check_deploy_is_clean_with_the_production_settings(tmp_path):
    result = check_deploy(django_env(tmp_path, **PRODUCTION))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_names_what_plain_http_lacks(tmp_path):
    """The default (make run on http://127.0.0.1) is not a production setup, and the check says why."""
    result = check_deploy(django_env(tmp_path))
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr, warning
    without_preload = check_deploy(django_env(tmp_path, **{**PRODUCTION, "SECURE_HSTS_PRELOAD": "0"}))
    assert without_preload.returncode != 0
    assert "security.W021" in without_preload.stderr  # preload is opt-in, and the only thing then missing
    assert without_preload.stderr.count("security.W") == 1


def settings_in(tmp_path: Path, **extra: str) -> dict[str, object]:
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({k: getattr(s, k) for k in ('SECURE_SSL_REDIRECT', 'SESSION_COOKIE_SECURE', "
        "'CSRF_COOKIE_SECURE', 'SECURE_HSTS_SECONDS', 'SECURE_PROXY_SSL_HEADER')}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=django_env(tmp_path, **extra), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    values: dict[str, object] = json.loads(result.stdout)
    return values


def test_https_settings_follow_the_environment(tmp_path):
    assert settings_in(tmp_path) == {
        "SECURE_SSL_REDIRECT": False,
        "SESSION_COOKIE_SECURE": False,
        "CSRF_COOKIE_SECURE": False,
        "SECURE_HSTS_SECONDS": 0,
        "SECURE_PROXY_SSL_HEADER": None,
    }
    assert settings_in(tmp_path, OLLM_HTTPS="1", OLLM_BEHIND_PROXY="1", SECURE_HSTS_SECONDS="3600") == {
        "SECURE_SSL_REDIRECT": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 3600,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
    }


def test_behind_a_proxy_https_is_taken_from_x_forwarded_proto(user):
    with override_settings(
        SECURE_SSL_REDIRECT=True,
        SECURE_HSTS_SECONDS=3600,
        SESSION_COOKIE_SECURE=True,
        SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    ):
        client = Client()
        plain = client.get("/accounts/login/")
        assert plain.status_code == 301
        assert plain["Location"] == "https://testserver/accounts/login/"
        proxied = client.get("/accounts/login/", headers={"X-Forwarded-Proto": "https"})
        assert proxied.status_code == 200
        assert proxied["Strict-Transport-Security"] == "max-age=3600"
        client.force_login(user)
        assert client.cookies["sessionid"]["secure"]


# /health


def test_health_answers_anonymously_with_the_status_only():
    response = Client().get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"
    assert not response.cookies
    assert Client().head("/health").status_code == 200


def test_health_answers_on_any_host_and_over_plain_http():
    """Docker probes http://127.0.0.1 inside the container, whatever ALLOWED_HOSTS and the https redirect say."""
    with override_settings(ALLOWED_HOSTS=["ollm.example.org"], SECURE_SSL_REDIRECT=True):
        client = Client()
        assert client.get("/health", headers={"Host": "127.0.0.1:8000"}).status_code == 200
        assert client.get("/accounts/login/", headers={"Host": "127.0.0.1:8000"}).status_code == 400


def test_health_refuses_other_methods():
    response = Client().post("/health")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


def test_health_says_unavailable_when_the_database_does_not_answer(monkeypatch, caplog):
    class Unreachable:
        def cursor(self):
            raise OperationalError("could not connect to server: secret-host-name")

    monkeypatch.setattr("ollm_site.health.connection", Unreachable())
    response = Client().get("/health")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable"}
    assert b"secret-host-name" not in response.content
    assert "the database does not answer" in caplog.text
