"""The tests' helpers in one place: plain functions that build what a test needs and drive it
(sessions, conversations, sockets, the browser's login, the system layer's processes), and the
constants they share.

Fixtures live in the conftest files: those that several directories use in ``tests/conftest.py``,
the others beside their tests. A test module imports helpers from here (or from ``tests/support``),
never from a conftest or from another test module: ``tests/integration/test_test_layout.py`` checks.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings

from chat.models import Checkpoint, ContextEvent, Message, Session
from chat.selectors.context import active_checkpoints, active_messages, session_budget, session_window
from chat.selectors.sessions import model_facts
from chat.selectors.snapshot_state import session_state
from chat.services.compression import CompressionOutcome, compression_run, session_effective_limits
from chat.services.messages import message_create
from chat.services.sessions import session_create, session_start
from engine.core.aging import MIN_TARGET_TOKENS, Level
from engine.core.config import SAMPLING_RANGES
from engine.core.reliability import is_small_model
from engine.core.selection import ContextMessage, select_for_compression
from engine.core.window import chat_messages
from tests.support.model_server import SERVED_MODEL, UNTAGGED_MODEL, Hold, ModelServerProcess
from tests.support.timing import scaled
from tests.system.support import (
    PYTHON,
    ROOT,
    Proc,
    WebSocket,
    start_daphne,
    start_worker,
    wait_daphne,
    wait_worker,
)
from tests.system.support import (
    event_types as stored_event_types,
)

# --- the OLLM CLI's session file ------------------------------------------------------------------

CLI_FILE = Path(__file__).parent / "data" / "ollm_cli_session.json"


def cli_file() -> dict[str, Any]:
    """The session file the OLLM CLI's ChatRecordingService wrote (tests/data/ollm_cli_session.json)."""
    return dict(json.loads(CLI_FILE.read_text(encoding="utf-8")))


def cli_file_history(recorded: dict[str, Any]) -> list[tuple[str, str, datetime]]:
    """(role, content, time) of each message an import of ``recorded`` (the CLI file) must store, in
    order: the tool call sits where its timestamp puts it, after the question, before the answer."""
    messages, (call,) = recorded["messages"], recorded["toolCalls"]

    def text(message: dict[str, Any]) -> str:
        return "".join(part["text"] for part in message["parts"])

    def when(stamp: str) -> datetime:
        return datetime.fromisoformat(stamp).astimezone(UTC)

    entries = [(m["role"], text(m), when(m["timestamp"])) for m in messages]
    return [entries[0], ("tool", call["result"]["llmContent"], when(call["timestamp"])), *entries[1:]]


# --- sessions and conversations, through the app's services -------------------------------------

TIER3 = 16384
TIER2 = 8192
# The served model's selections squeezed so that a few turns reach the trigger: a Tier 3 (16K,
# three checkpoints kept) to 1,500 tokens, a Tier 2 (8K) and a 4K to 1,200.
# A model size whose summaries the compression asks for and takes as written (a small model is asked for none).
WRITER_SIZE_B = 7.0
# The ``how`` of a small model's checkpoint, which the model was not asked for (issue 45, item 6).
SMALL_MODEL_HOW = "extract: a small model's summaries do not help"
SMALL_CONTEXTS = {SERVED_MODEL: {TIER3: 1500, TIER2: 1200, 4096: 1200}}
# Plain prose without paths, numbers, quotes or decisions: no key facts, so a canned summary is
# never retried for lost facts and each compression is one call.
ANSWER = (
    "The answer walks through the idea step by step and explains why each part matters for the reader. "
    "It closes with a short recap of the main points so far. "
)
# An answer about logins (it has key facts: argon2, constant time, the audit log).
LOGIN_ANSWER = (
    "The handler validates the form, hashes the password with argon2 and compares it in constant time. "
    "It then issues a short-lived token and records the login in the audit log for later review. "
)
LOGIN_QUESTION = "Question {index} about logins?"
# A locked decision and a file, as a model's reply marks them.
MARKERS = "[DECISION] Use argon2 for passwords - LOCKED\n[ARTIFACT] Created src/auth/hash.ts\n"
BRIEF = {"compression": {"summary_max_tokens": 128}}
# Chat replies at temperature 0 (OLLM_CONTEXT_DEFAULTS): the same text each run, for tests that read it.
GREEDY_REPLIES = {"sampling": {"temperature": 0.0}}


def settings_form(**changes: str | None) -> dict[str, str]:
    """The settings panel's form as it comes with the defaults, with ``changes`` (None: a box left unticked)."""
    values: dict[str, str | None] = {
        "compression_enabled": "1",
        "strategy": "summarize",
        "preserve_recent": "2048",
        "summary_max_tokens": "1024",
        "summary_model": "",
        "snapshots_enabled": "1",
        "auto_create": "1",
        "auto_threshold": "0.8",
    }
    values.update(changes)
    return {k: v for k, v in values.items() if v is not None}


def sampled_options(model_server: ModelServerProcess) -> list[dict[str, Any]]:
    """The sampling options of each reply the model server was asked for since it was reset, in order."""
    return [
        {name: value for name, value in request["options"].items() if name in SAMPLING_RANGES}
        for request in model_server.behaviour.requests
        if request["path"] == "/api/chat"
    ]


def small_session(
    owner: Any,
    *,
    model: str = SERVED_MODEL,
    context_size: int = TIER3,
    system_prompt: str = "Be brief.",
    contexts: dict[str, dict[int, int]] | None = SMALL_CONTEXTS,
    settings: dict[str, Any] | None = None,
    parameter_size_b: float | None = None,
    **sections: Any,
) -> Session:
    """A session that reaches its trigger after a few turns: by default the served model on a
    context squeezed by ``contexts`` (``None``: the model's own sizes).

    ``sections`` are its compression/snapshot overrides (``compression={...}``); without them a
    summary is capped at 128 tokens. ``settings`` gives the whole settings mapping instead
    (``{}``: the defaults); ``parameter_size_b`` stands for the model's size (``WRITER_SIZE_B``: one
    whose summaries are taken as written)."""
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES=contexts) if contexts is not None else nullcontext():
        return session_create(
            owner=owner,
            model=model,
            context_size=context_size,
            system_prompt=system_prompt,
            settings=settings if settings is not None else sections or BRIEF,
            parameter_size_b=parameter_size_b,
        )


def session_on_model_of_size(
    owner: Any, size: str, gateway: Any, model_server: ModelServerProcess, **start: Any
) -> Session:
    """A session (squeezed as ``small_session``'s) on a model the Ollama stand-in reports as ``size``
    ("13B"; "": no size), started as every door starts one: the backend is asked about the model
    and its answer stored. ``start``: more of ``session_start``'s arguments (``goal``, ``settings``)."""
    model_server.behaviour.parameter_sizes = {UNTAGGED_MODEL: size}
    facts = model_facts(model=UNTAGGED_MODEL, gateway=gateway)
    with override_settings(OLLM_MODEL_CONTEXT_OVERRIDES={UNTAGGED_MODEL: {TIER3: 1500}}):
        return session_start(
            owner=owner, model=UNTAGGED_MODEL, context_size=TIER3, facts=facts, **{"settings": BRIEF, **start}
        )


def converse(
    session: Session,
    turns: int,
    *,
    start: int = 0,
    question: str = "Question number {index}, please?",
    answer: str | Callable[[int], str] = ANSWER * 2,
    markers_at: int | None = None,
) -> list[Message]:
    """``turns`` question/answer pairs appended to the history (no model involved); the answers.

    ``question`` is formatted with the pair's ``index``; ``answer`` is a text or a function of the
    index; the answer at index ``markers_at`` opens with ``MARKERS``."""
    replies = []
    for index in range(start, start + turns):
        message_create(session=session, role="user", content=question.format(index=index))
        text = answer(index) if callable(answer) else answer
        replies.append(
            message_create(session=session, role="assistant", content=(MARKERS if index == markers_at else "") + text)
        )
    return replies


def until_due(session: Session, *, start: int = 0) -> int:
    """Converse until the budget calls for a compression; returns the next turn index."""
    index = start
    while not session_budget(session=session).compression_due:
        converse(session, 1, start=index)
        index += 1
        assert index < start + 200, "the session never reached its trigger"
    return index


# Plain, varied prose (no phrase of six words twice, no facts) to cut summaries of a given size from:
# a canned summary made of it is never taken for a loop (engine/core/repetition.py).
PROSE = (
    "The team reviewed the onboarding flow and agreed that new users should see a short welcome screen before "
    "anything else. Designers sketched three variants of the screen, each with a different tone, and the writers "
    "drafted friendly copy for every one of them. Engineers estimated the work for the form, the validation rules "
    "and the email confirmation, then split it into small pieces that fit into a single afternoon. Testers "
    "described how a careless visitor might skip a field, paste odd characters or close the tab halfway, and what "
    "the page should say in each case. Product managers weighed the cost of a richer tutorial against the risk of "
    "overwhelming people on their first visit. Support staff shared the questions customers ask most often, which "
    "shaped the order of the hints shown beside each input. Security reviewers asked for rate limiting on the "
    "signup endpoint and for clear messages that never reveal whether an address already exists. Accessibility "
    "experts checked contrast, focus order and labels so that screen readers announce every control properly. "
    "Marketing requested a gentle prompt inviting people to subscribe to the newsletter without making it "
    "mandatory. Analysts proposed measuring how long each step takes and where visitors abandon the process, so "
    "later changes can be judged by evidence. Operations wanted alerts when confirmation emails bounce or arrive "
    "late, since delays frustrate everyone waiting to log in. Legal counsel reminded everybody that consent must "
    "be explicit and that the privacy notice has to be easy to find. Finally the group scheduled a demonstration "
    "for stakeholders, collected open questions in a shared document and promised to revisit the plan after the "
    "first week of real traffic."
)


def prose_of(tokens: int, count: Callable[[list[str]], list[int]], *, label: str, offset: int = 0) -> str:
    """The longest text ``label: <words of PROSE from word offset on>`` of at most ``tokens`` tokens
    as ``count`` (the model's tokenizer, many texts at once) counts them."""
    words = PROSE.split()[offset:]
    candidates = [f"{label}: " + " ".join(words[:n]) for n in range(1, len(words) + 1)]
    fitting = [text for text, n in zip(candidates, count(candidates), strict=True) if n <= tokens]
    assert fitting, f"no text of {tokens} tokens or fewer starts with {label!r}"
    return fitting[-1]


# The spec's aging ("Compress to 60%", "Compress to 50%", "Compress to 40%"): the share of its
# current size a checkpoint aging to level 2, 1 or ultra (0) is compressed to, capped by the share
# of the summary size each level keeps ("~1200 tokens", "~600", "~300", "~150": the summary size, then
# 60%, 30% and 12% of it), and never below the core's floor.
AGING_RATIO = {Level.OLD: 0.6, Level.ANCIENT: 0.5, Level.ULTRA: 0.4}
LEVEL_SHARE = {Level.OLD: 0.6, Level.ANCIENT: 0.3, Level.ULTRA: 0.12}
# A summary the model writes in ``compress_with_model_summaries`` takes this share of its target, so
# that the cap (num_predict) never cuts it and the product accepts it as written.
SUMMARY_SHARE = 0.7


def spec_aging_target(to_level: int, tokens_before: int, summary_max_tokens: int) -> float:
    """The size the spec's aging gives a checkpoint of ``tokens_before`` tokens aging to ``to_level``."""
    level = Level(to_level)
    return max(MIN_TARGET_TOKENS, min(LEVEL_SHARE[level] * summary_max_tokens, AGING_RATIO[level] * tokens_before))


@dataclass(frozen=True)
class ModelSummaries:
    """What the model wrote in one compression: the new checkpoint's summary and, by checkpoint
    id, each aged checkpoint's (a merge's under the oldest of the merged checkpoints, which carries
    it); ``after_event``: the id of the session's last event before the compression."""

    new: str
    aged: dict[int, str]
    after_event: int


def compress_with_model_summaries(
    session: Session, gateway: Any, model_server: ModelServerProcess, count: Callable[[list[str]], list[int]]
) -> ModelSummaries:
    """Compress the (due) session once, the model writing every summary: the new checkpoint's, each
    aging checkpoint's and the merge into the ultra checkpoint, in the order the compression asks
    for them, each well within the size the spec's aging allows (``spec_aging_target``; ``count``:
    the model's tokenizer). Fails unless the compression asked for exactly those.

    The session's model must not be a small one (``small_session(parameter_size_b=WRITER_SIZE_B)``):
    a small model is asked for no summary, its extract stands."""
    session.refresh_from_db()
    assert not is_small_model(session.model_parameter_size_b), "a small model is asked for no summary"
    summary_max = session_effective_limits(session).summary_max_tokens
    number = session.compression_count + 1
    active = list(active_checkpoints(session=session))
    aging = [cp for cp in active if cp.level in (Level.RECENT, Level.OLD)]
    assert len(aging) < session.profile.tier.max_checkpoints, "a merge of the tier's overflow is not planned here"
    ancient = [cp for cp in active if cp.level == Level.ANCIENT]
    merging = [cp for cp in active if cp.level in (Level.ANCIENT, Level.ULTRA)] if ancient else []

    def text(tokens: float, label: str, offset: int) -> str:
        return prose_of(int(tokens * SUMMARY_SHARE), count, label=label, offset=offset % 120)

    # A summary must free 30% of what it replaces (core.budget.MIN_SHRINK): at most half of it.
    active_messages_ = [
        ContextMessage(id=m.id, role=m.role, tokens=m.tokens, group=m.tool_call_id or None)  # type: ignore[arg-type]
        for m in active_messages(session=session)
    ]
    selected = select_for_compression(
        active_messages_, preserve_recent=session_effective_limits(session).preserve_recent
    ).tokens
    new = text(min(summary_max, selected / 2 / SUMMARY_SHARE), f"Recap {number}", number * 17)
    aged = {
        cp.id: text(
            spec_aging_target(cp.level - 1, cp.current_tokens, summary_max),
            f"Checkpoint {cp.number} at level {cp.level - 1}",
            number * 17 + cp.number * 5,
        )
        for cp in aging
    }
    if merging:
        tokens_before = sum(cp.current_tokens for cp in merging)
        aged[merging[0].id] = text(
            spec_aging_target(Level.ULTRA, tokens_before, summary_max), "Ultra recap", number * 17 + 3
        )
    after_event = ContextEvent.objects.filter(session=session).order_by("-id").values_list("id", flat=True).first()
    model_server.behaviour.requests.clear()
    model_server.behaviour.canned_replies = [new, *aged.values()]
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "compressed", outcome
    asked = [r for r in model_server.behaviour.requests if r["path"] == "/api/chat"]
    assert len(asked) == 1 + len(aged), f"{len(asked)} summaries asked for, {1 + len(aged)} planned"
    return ModelSummaries(new=new, aged=aged, after_event=after_event or 0)


def event_types(session: Session) -> list[str]:
    """The types of the session's context events, oldest first."""
    return list(ContextEvent.objects.filter(session=session).order_by("id").values_list("type", flat=True))


def created(outcome: CompressionOutcome) -> Checkpoint:
    """The checkpoint a compression or rollover created (or carried over)."""
    assert outcome.checkpoint_id is not None, outcome
    return Checkpoint.objects.get(pk=outcome.checkpoint_id)


def prompt(session: Session) -> list[tuple[str, str]]:
    """The (role, content) pairs the session's next call would send."""
    return chat_messages(session_window(session=session))


def frozen(session: Session) -> tuple[Any, ...]:
    """Everything a failed compression must leave as it was: the full history, the
    checkpoints, the goal state and the prompt the next call would send."""
    session.refresh_from_db()
    state = session_state(session=session)
    del state["messages"]  # compared message by message in ``history`` below
    history = list(
        Message.objects.filter(session=session)
        .order_by("position")
        .values_list("id", "role", "content", "tokens", "compressed_into_id", "excluded_from_context")
    )
    return state, history, prompt(session), session.compression_count


def summary_requests(model_server: ModelServerProcess) -> list[dict[str, Any]]:
    """The chat requests the model server has seen (summaries, when no turn ran)."""
    return [r for r in model_server.behaviour.requests if r["path"] == "/api/chat"]


# --- the chat socket, through the real ASGI stack ------------------------------------------------

SOCKET_TIMEOUT = scaled(120)


def session_cookie(user: Any) -> bytes:
    """The ``Cookie`` header of a browser logged in as ``user``."""
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def socket(
    session_id: Any, user: Any = None, origin: bytes | None = b"http://localhost", query: str = ""
) -> WebsocketCommunicator:
    """A (not yet connected) socket to the session's chat, logged in as ``user`` when given,
    from the page at ``origin`` (``None``: a request without an ``Origin`` header); ``query``: its
    query string (``live=1``, as a page rendered during a reply opens it)."""
    from ollm_site.asgi import application

    headers = [] if origin is None else [(b"origin", origin)]
    if user is not None:
        headers.append((b"cookie", await sync_to_async(session_cookie)(user)))
    path = f"/ws/sessions/{session_id}/" + (f"?{query}" if query else "")
    return WebsocketCommunicator(application, path, headers=headers)


async def frames_until(communicator: WebsocketCommunicator, marker: str) -> list[str]:
    """Every frame up to and including the first that contains ``marker``."""
    frames = []
    while True:
        frame = await communicator.receive_from(timeout=SOCKET_TIMEOUT)
        frames.append(frame)
        if marker in frame:
            return frames


# --- the browser (tests/e2e) --------------------------------------------------------------------

E2E_USERNAME, E2E_PASSWORD = "e2e-user", "e2e-pass-9472"


def log_in(page: Any, live_url: str) -> None:
    """Open the app, which asks for a login first, and log in as the e2e test user."""
    page.goto(live_url + "/")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", E2E_USERNAME)
    page.fill("input[name=password]", E2E_PASSWORD)
    page.click("button[type=submit]")


# --- the system layer (tests/system): real processes on PostgreSQL and Redis ---------------------

SYSTEM_USERNAME, SYSTEM_PASSWORD = "system-user", "system-pass-5521"
# A compression lease lives this long without a heartbeat: a killed worker's lease frees itself quickly.
LEASE_SECONDS = 6
# A chat turn over a socket ends within this.
TURN_SECONDS = 60
HELD_SUMMARY = "Logins are validated with argon2 and audited."


def seed(env: dict[str, str], order: dict[str, object]) -> dict[str, Any]:
    """Write test data through the app's services in a process with the stack's environment."""
    done = subprocess.run(
        [PYTHON, "-m", "tests.system.seed", json.dumps(order)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def login(base_url: str) -> str:
    """Log in through the login form; the ``Cookie`` header value (session and CSRF cookies)."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        client.get("/accounts/login/").raise_for_status()
        answer = client.post(
            "/accounts/login/",
            data={
                "username": SYSTEM_USERNAME,
                "password": SYSTEM_PASSWORD,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
        )
        assert answer.status_code == 302, answer.text[:500]
        return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


@dataclass
class Stack:
    """Web processes and workers sharing one database and one Redis."""

    env: dict[str, str]
    logdir: Path
    webs: list[tuple[Proc, int]] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    cookie: str = ""

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.webs[index][1]}"

    def ws_url(self, index: int, session_id: str) -> str:
        return f"ws://127.0.0.1:{self.webs[index][1]}/ws/sessions/{session_id}/"

    def csrf(self) -> str:
        return dict(part.split("=", 1) for part in self.cookie.split("; "))["csrftoken"]

    def post(self, index: int, path: str) -> httpx.Response:
        return httpx.post(
            self.url(index) + path,
            headers={"Cookie": self.cookie, "X-CSRFToken": self.csrf(), "Referer": self.url(index) + "/"},
            timeout=30,
        )

    def new_session(self, **spec: object) -> str:
        return self.new_sessions(1, **spec)[0]

    def new_sessions(self, count: int, **spec: object) -> list[str]:
        order = {"owner": SYSTEM_USERNAME, "model": SERVED_MODEL, "context_size": 4096, "count": count, **spec}
        ids: list[str] = seed(self.env, {"session": order})["ids"]
        return ids

    def due_session(self, **spec: object) -> str:
        """A session whose active conversation has reached its compression trigger, of a model that is
        asked for summaries (a small one's compressions take the extract and ask nothing)."""
        order: dict[str, object] = {
            "parameter_size_b": WRITER_SIZE_B,
            "context_size": 8192,
            "pairs": 18,
            "answer": LOGIN_ANSWER,
            "settings": {"compression": {"summary_max_tokens": 48}},
        }
        return self.new_session(**{**order, **spec})

    def add_worker(self, name: str, *, pool: str = "prefork", env: dict[str, str] | None = None) -> Proc:
        worker = start_worker(name, env or self.env, self.logdir, pool=pool)
        self.workers.append(worker)
        wait_worker(worker)
        return worker

    def stop(self) -> None:
        for proc in [w for w, _ in self.webs] + self.workers:
            proc.stop()


def stack_start(env: dict[str, str], logdir: Path, *, name: str, webs: int, workers: int, pool: str) -> Stack:
    """Start ``webs`` daphne processes and ``workers`` Celery workers, wait for all, log in."""
    stack = Stack(env, logdir)
    stack.webs = [start_daphne(f"{name}-web{i + 1}", env, logdir) for i in range(webs)]
    stack.workers = [start_worker(f"{name}-worker{i + 1}", env, logdir, pool=pool) for i in range(workers)]
    try:
        with concurrent.futures.ThreadPoolExecutor() as pool_:
            waits = [pool_.submit(wait_daphne, proc, port) for proc, port in stack.webs]
            waits += [pool_.submit(wait_worker, proc) for proc in stack.workers]
            for wait in waits:
                wait.result()
        if stack.webs:
            stack.cookie = login(stack.url(0))
    except BaseException:
        stack.stop()
        raise
    return stack


async def chat(ws: WebSocket, text: str) -> None:
    """Send a message and wait until its turn is over (reply stored and shown, or an error)."""
    before = len(ws.frames.texts)
    await ws.send_json(json.dumps({"action": "send", "message": text}))
    await ws.wait_for(lambda f: f.turn_done(before), timeout=TURN_SECONDS, what=f"the reply to {text!r}")


def outcomes(dsn: str, session_id: str) -> list[str]:
    """The outcomes of the session's compressions so far, from the database."""
    finished = ("compressed", "compression-skipped", "compression-error", "rollover-complete")
    return [t for t in stored_event_types(dsn, session_id) if t in finished]


def held_generation(llm: ModelServerProcess) -> Hold:
    """Make the LLM hold every generation until the returned hold is set (then answer a short summary)."""
    llm.behaviour.canned_reply = HELD_SUMMARY
    hold: Hold = llm.hold()
    return hold


# --- the chat page in a browser (tests/e2e) ---

SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
REPLY_TIMEOUT_MS = scaled(180_000)


def new_session(page, title: str, context_size: str = "4096") -> None:
    """From the sessions list's new-session form."""
    form = page.locator("form[action$='/sessions/new/']")
    form.locator("input[name=title]").fill(title)
    form.locator("select[name=model]").select_option("embedded/smollm2-135m")
    form.locator("select[name=context_size]").select_option(context_size)
    form.locator("button:has-text('Start')").click()
    page.wait_for_selector("body[data-socket=open]", state="attached")


def send(page, text: str) -> None:
    """Enter sends; the page marks the turn as streaming as it sends (before any frame comes back)."""
    page.fill("#composer-text", text)
    page.keyboard.press("Enter")


def wait_idle(page) -> None:
    page.wait_for_selector("#turn-state[data-streaming='0']", state="attached", timeout=REPLY_TIMEOUT_MS)
