"""Several people chatting at once over the REST API, each in a session of their own: the load
test's and ``bench/load.py``'s driver. Each client is a thread with its own user and token."""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support.live_server import manage
from tests.support.model_server import ModelServerProcess

# Questions that ask for long answers, so replies reach their cap and compressions come often.
TOPICS = [
    "how a compiler turns source code into machine code",
    "how the water cycle works",
    "how vaccines train the immune system",
    "how a database index speeds up queries",
    "how photosynthesis stores energy",
    "how a bicycle stays upright",
    "how interest rates affect house prices",
    "how bees find flowers and tell the hive",
    "how a refrigerator moves heat",
    "how the internet routes a message",
    "how earthquakes happen",
    "how a steam engine works",
]


def question(client: int, turn: int) -> str:
    topic = TOPICS[(client * 5 + turn) % len(TOPICS)]
    return f"Explain in detail {topic}, step by step, with examples and the history of the idea."


@dataclass
class ClientRun:
    session_id: str = ""
    turn_seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # Any moment the context held more than the session's num_ctx (``used`` > ``max_tokens``).
    over_budget: list[str] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    last_turn_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class LoadRun:
    clients: list[ClientRun]
    seconds: float
    hosts: list[dict[str, Any]]

    @property
    def turn_seconds(self) -> list[float]:
        return sorted(s for c in self.clients for s in c.turn_seconds)

    def percentile(self, share: float) -> float:
        values = self.turn_seconds
        return values[min(len(values) - 1, max(0, round(share * len(values)) - 1))] if values else 0.0

    @property
    def p50(self) -> float:
        return statistics.median(self.turn_seconds) if self.turn_seconds else 0.0

    def count(self, event: str) -> int:
        return sum(c.events[event] for c in self.clients)

    @property
    def compressions(self) -> int:
        return self.count("compressed") + self.count("rollover-complete")

    @property
    def longest_background_wait(self) -> float:
        return max((h["longest_background_wait_seconds"] for h in self.hosts), default=0.0)


def users_with_tokens(work: Path, model_server: ModelServerProcess, count: int) -> list[str]:
    """``count`` users on the live server's database (``load1``…), an API token each."""
    # load1 is staff: the run reads /api/hosts, which is the operators' (issue 49, item 4).
    create = "; ".join(
        f"get_user_model().objects.get_or_create(username='load{n}', defaults={{'is_staff': {n == 1}}})"
        for n in range(1, count + 1)
    )
    manage(work, model_server, "shell", "-c", f"from django.contrib.auth import get_user_model; {create}")
    return [
        manage(work, model_server, "create_api_token", f"load{n}", "--name", "load").strip()
        for n in range(1, count + 1)
    ]


def _client(url: str, token: str, index: int, turns: int, model: str, context_size: int, run: ClientRun) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=900) as api:
        created = api.post(
            "/api/sessions", json={"model": model, "context_size": context_size, "title": f"load {index}"}
        )
        if created.status_code != 201:
            run.failures.append(f"session: {created.status_code} {created.text}")
            return
        run.session_id = created.json()["id"]
        for turn in range(turns):
            started = time.monotonic()
            try:
                answer = api.post(f"/api/sessions/{run.session_id}/messages", json={"content": question(index, turn)})
            except httpx.HTTPError as exc:
                # Recorded, not raised: a client's thread that died would say nothing of why its turns are missing.
                run.failures.append(f"turn {turn + 1}: {exc!r} after {time.monotonic() - started:.0f} s")
                return
            run.turn_seconds.append(time.monotonic() - started)
            if answer.status_code != 200:
                run.failures.append(f"turn {turn + 1}: {answer.status_code} {answer.text[:300]}")
            context = api.get(f"/api/sessions/{run.session_id}/context").json()
            # The history the model saw must never have been more than its context.
            if (
                context["max_tokens"]
                < context["system_tokens"]
                + context["goal_tokens"]
                + context["checkpoint_tokens"]
                + context["message_tokens"]
            ):
                run.over_budget.append(f"turn {turn + 1}: {context['display']}")
        run.last_turn_at = datetime.now(UTC)


OUTCOMES = ("compressed", "rollover-complete", "compression-skipped", "compression-error")


def _events(api: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        page = api.get(f"/api/sessions/{session_id}/events", params={"limit": 100, "offset": len(events)}).json()
        events += page["items"]
        if len(events) >= page["count"]:
            return events


def _settled(api: httpx.Client, run: ClientRun) -> list[dict[str, Any]] | None:
    """The session's events once no compression is due or to come; else None. One is to come when the
    budget calls for one and none has ended since the last turn, or the last one failed with a retry ahead."""
    context = api.get(f"/api/sessions/{run.session_id}/context").json()
    events = _events(api, run.session_id)
    if context["message_tokens"] < context["trigger_at"]:
        return events
    ended = [e for e in events if e["type"] in OUTCOMES and datetime.fromisoformat(e["created_at"]) > run.last_turn_at]
    if ended and not (ended[-1]["type"] == "compression-error" and ended[-1]["payload"].get("retry_in")):
        return events
    return None


def _settle(url: str, token: str, run: ClientRun, *, timeout: float) -> None:
    """Wait until the client's session has no compression due or to come, then read its events."""
    if not run.session_id:
        return
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as api:
        deadline = time.monotonic() + timeout
        while (events := _settled(api, run)) is None:
            if time.monotonic() > deadline:
                run.failures.append(f"its compressions did not settle in {timeout:.0f} s")
                events = _events(api, run.session_id)
                break
            time.sleep(0.5)
    run.events = Counter(e["type"] for e in events)
    run.errors = [str(e["payload"].get("reason")) for e in events if e["type"] == "compression-error"]


def load_run(
    url: str, tokens: list[str], *, turns: int, model: str, context_size: int = 2048, settle_seconds: float = 600
) -> LoadRun:
    """Every token's client chats ``turns`` turns at once with the others; then their compressions settle."""
    runs = [ClientRun() for _ in tokens]
    started = time.monotonic()
    threads = [
        threading.Thread(target=_client, args=(url, token, index, turns, model, context_size, run))
        for index, (token, run) in enumerate(zip(tokens, runs, strict=True))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - started
    for token, run in zip(tokens, runs, strict=True):
        _settle(url, token, run, timeout=settle_seconds)
    hosts = httpx.get(f"{url}/api/hosts", headers={"Authorization": f"Bearer {tokens[0]}"}, timeout=60).json()
    return LoadRun(runs, seconds, hosts)
