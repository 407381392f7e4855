"""The site served over HTTP for the drop-in clients' tests, with alice's (the e2e user's) API token."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.factories import E2E_PASSWORD, E2E_USERNAME
from tests.support.timing import scaled

GOAL = "Plan a two-week trip to Japan"
DECISION = "Travel between cities by train"


class DropIn:
    """The server, alice's (the e2e user's) token and a logged-in browser's cookies."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=scaled(60))

    def sessions(self) -> list[dict[str, Any]]:
        return list(self.api.get("/api/sessions", params={"limit": 500}).json()["items"])

    def history(self, session_id: str) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        while True:
            page = self.api.get(
                f"/api/sessions/{session_id}/messages",
                params={"include_compressed": True, "limit": 100, "offset": len(messages)},
            ).json()
            messages += page["items"]
            if len(messages) >= page["count"]:
                return messages

    def pin(self, session_id: str) -> None:
        """The goal and its locked decision, set as a script would (REST API)."""
        goal = self.api.post(f"/api/sessions/{session_id}/goals", json={"description": GOAL, "priority": "high"})
        assert goal.status_code == 201, goal.text
        decision = self.api.post(
            f"/api/goals/{goal.json()['id']}/decisions", json={"description": DECISION, "locked": True}
        )
        assert decision.status_code == 201, decision.text

    def dashboard(self, path: str) -> str:
        """A page as the logged-in user sees it."""
        with self._browser() as browser:
            page = browser.get(path)
            assert page.status_code == 200
            return page.text

    def dashboard_post(self, page: str, action: str, data: dict[str, str]) -> httpx.Response:
        """A form of ``page`` posted to ``action`` as the logged-in user, with the page's CSRF token."""
        with self._browser() as browser:
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', browser.get(page).text)
            assert token is not None
            return browser.post(
                action, data={**data, "csrfmiddlewaretoken": token.group(1)}, headers={"Referer": f"{self.url}{page}"}
            )

    @contextmanager
    def _browser(self) -> Iterator[httpx.Client]:
        """A browser logged in as alice."""
        with httpx.Client(base_url=self.url, timeout=scaled(60), follow_redirects=True) as browser:
            login = browser.get("/accounts/login/")
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
            assert token is not None
            browser.post(
                "/accounts/login/",
                data={"username": E2E_USERNAME, "password": E2E_PASSWORD, "csrfmiddlewaretoken": token.group(1)},
                headers={"Referer": f"{self.url}/accounts/login/"},
            )
            yield browser
