"""The release (issue 48, item 5): pyproject.toml names it, every page's footer and /health show it, and
CHANGELOG.md has its section, the newest, under the Unreleased one."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def release() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    return version


def test_the_settings_hold_the_version_of_pyproject(release):
    assert release == settings.OLLM_VERSION


def test_health_answers_with_the_version(release):
    assert Client().get("/health").json() == {"status": "ok", "version": release}


def test_every_page_shows_the_version_in_its_footer(user, chat_session, release):
    client = Client()
    footer = f'<footer class="site-footer">ollm-site {release}</footer>'
    assert footer in client.get(reverse("login")).content.decode(), "the login page"
    client.force_login(user)
    pages = ("chat:session_list", "accounts:tokens", "search:search")
    for url in [*(reverse(name) for name in pages), reverse("chat:chat", args=[chat_session.pk])]:
        assert footer in client.get(url).content.decode(), url


def test_the_changelog_holds_the_release_under_the_unreleased_section(release):
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[([^\]]+)\](.*)$", text, flags=re.MULTILINE)
    assert releases[0] == ("Unreleased", "")
    assert re.fullmatch(r" - \d{4}-\d{2}-\d{2}", releases[1][1]), releases[1]
    assert releases[1][0] == release, "the newest release in CHANGELOG.md is pyproject.toml's version"
