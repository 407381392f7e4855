"""Security properties of every route, derived from the URL conf so that a route added later is covered.

- Anonymous requests are refused on every route (login redirect, or 401/403/404 under /api/)
  except a short allow-list.
- Another user's ids give 404 on every route that takes one, and never their data.
- Every unsafe method without a CSRF token answers 403 for a logged-in cookie client.
- What users and models write is escaped on every page that shows it.

The walk fills each path parameter with the id of a real object (``parameters()``): a route
with a parameter the table does not know fails the walk, so it cannot be skipped silently.
"""

from __future__ import annotations

import inspect
import io
import re
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils.html import escape
from ninja.operation import PathView

from accounts.models import ApiToken
from accounts.services import api_token_create
from chat.management.commands.seed_demo import seed_demo_session
from chat.models import (
    Artifact,
    Checkpoint,
    ContextEvent,
    Decision,
    EventType,
    Goal,
    GoalCheckpoint,
    Message,
    Session,
    Snapshot,
)
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.client_tasks import ClientTaskRequest, client_task_record
from chat.services.events import event_record
from chat.services.goals import (
    artifact_record,
    decision_record,
    goal_apply_markers,
    goal_checkpoint_set,
    goal_create,
)
from chat.services.messages import message_create
from chat.services.sessions import session_create, session_update
from chat.services.snapshots import snapshot_create
from chat.web.fragments import chat_fragments
from engine.core.client_history import ClientMessage
from engine.core.retention import Fact
from engine.llm.types import Sampling
from ollm_site.api import api as ninja_api
from tests.factories import socket

pytestmark = pytest.mark.django_db

LOGIN_PAGES = ("/accounts/login/", "/admin/login/")
UNSAFE_METHODS = ("post", "put", "patch", "delete")
TOKEN_ONLY = ("/ollama/", "/v1/")
DJANGO_METHODS = ("get", "post", "put", "patch", "delete")

# Routes anyone may open, by URL name, and why.
PUBLIC_ROUTES = {
    "login": "the login form",
    "logout": "logging out needs no account",
    "admin:login": "the admin's login form",
    "admin:logout": "logging out needs no account",
}


@dataclass(frozen=True)
class Route:
    template: str  # "/sessions/<uuid:session_id>/", "/admin/<app_label>/"
    name: str
    callback: Callable[..., Any]

    @property
    def parameters(self) -> list[str]:
        return re.findall(r"<(?:\w+:)?(\w+)>", self.template)

    @property
    def is_api(self) -> bool:
        return self.template.startswith(("/api/", *TOKEN_ONLY))

    @property
    def is_token_only(self) -> bool:
        """The Ollama and OpenAI endpoints: an API token or nothing, never a browser's cookie (so they need
        no CSRF token: no page can make a browser call them)."""
        return self.template.startswith(TOKEN_ONLY)

    @property
    def admin_model(self) -> type[Any] | None:
        match = re.match(r"/admin/(\w+)/(\w+)/", self.template)
        if match is None:
            return None
        try:
            return apps.get_model(match.group(1), match.group(2))
        except LookupError:
            return None

    @property
    def path_view(self) -> PathView | None:
        """The ninja PathView behind an API route (its operations know their methods)."""
        try:
            closure = inspect.getclosurevars(self.callback).nonlocals
        except TypeError:
            return None
        view = closure.get("self")
        return view if isinstance(view, PathView) else None

    def methods(self) -> list[str]:
        """The declared methods of an API route; for a Django view, every method (the view refuses the rest)."""
        view = self.path_view
        if view is None:
            return list(DJANGO_METHODS)
        return sorted({method.lower() for operation in view.operations for method in operation.methods})

    def url(self, values: dict[str, Any]) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            assert name in values, f"{self.template}: no value for the path parameter {name!r}; add one to parameters()"
            return str(values[name])

        return re.sub(r"<(?:\w+:)?(\w+)>", value, self.template)


def _template(prefix: str, pattern: Any) -> str:
    text = str(pattern.pattern)
    if pattern.pattern.__class__.__name__ == "RegexPattern":
        text = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"<\1>", text).replace("^", "").replace("$", "")
        assert not re.search(r"[()[\]*+?\\|]", text), f"cannot turn the regex {pattern.pattern} into a URL"
    return prefix + text


def walk(patterns: list[Any] | None = None, prefix: str = "/", namespace: str = "") -> Iterator[Route]:
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from walk(pattern.url_patterns, _template(prefix, pattern), inner)
        elif isinstance(pattern, URLPattern):
            yield Route(_template(prefix, pattern), f"{namespace}{pattern.name or ''}", pattern.callback)


def routes() -> list[Route]:
    """Every route once: ninja lists a path once per operation, and the first one is what resolves."""
    seen: dict[str, Route] = {}
    for route in walk():
        seen.setdefault(route.template, route)
    return list(seen.values())


def objects_of(user: Any, marker: str) -> dict[str, Any]:
    """A demo session (checkpoints, goal, decisions, snapshots, events) plus one of each remaining kind."""
    session = seed_demo_session(owner=user)
    session = session_update(session=session, title=f"{marker} title")
    message = message_create(session=session, role="user", content=f"{marker} message")
    goal = Goal.objects.filter(session=session).first()
    assert goal is not None
    token, _ = api_token_create(user=user, name=f"{marker} token")
    client_task_record(
        request=ClientTaskRequest(
            owner=user,
            token=token,
            client="Open WebUI",
            kind="title",
            model=session.model,
            messages=(ClientMessage("user", f"### Task: {marker} task"),),
            num_ctx=None,
            sampling=Sampling(),
        ),
        response=f"{marker} answer",
        result=None,
        error="",
    )
    return {
        "session": session,
        "goal": goal,
        "goal_checkpoint": GoalCheckpoint.objects.filter(goal=goal).first(),
        "decision": Decision.objects.filter(session=session).first(),
        "snapshot": Snapshot.objects.filter(session=session).first(),
        "token": token,
        "message": message,
    }


def parameters(user: Any, objects: dict[str, Any], route: Route) -> dict[str, Any]:
    """A real id for every path parameter of ``route``."""
    model = route.admin_model
    admin_object = None
    if model is Session:
        admin_object = objects["session"]
    elif model is get_user_model():
        admin_object = user
    elif model is not None:
        rows = model._default_manager.order_by("pk")
        if any(field.name == "session" for field in model._meta.get_fields()):
            rows = rows.filter(session=objects["session"])
        admin_object = rows.first()
        assert admin_object is not None, f"no {model.__name__} to fill {route.template}"
    return {
        "session_id": objects["session"].pk,
        "goal_id": objects["goal"].pk,
        "checkpoint_id": objects["goal_checkpoint"].pk,
        "decision_id": objects["decision"].pk,
        "snapshot_id": objects["snapshot"].pk,
        "message_id": objects["message"].pk,
        "token_id": objects["token"].pk,
        "object_id": admin_object.pk if admin_object is not None else objects["session"].pk,
        "id": user.pk,
        "content_type_id": ContentType.objects.get_for_model(Session).pk,
        "app_label": "chat",
        "url": "no-such-page/",
    }


def request(client: Client, method: str, url: str, body: Any = None, **extra: Any) -> Any:
    if method == "get":
        return client.get(url, **extra)
    return getattr(client, method)(url, {} if body is None else body, content_type="application/json", **extra)


def data_counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Session, Message, Checkpoint, Goal, GoalCheckpoint, Decision, Artifact, Snapshot, ApiToken)
    }


@pytest.fixture
def alice_data(user):
    Group.objects.create(name="reviewers")
    return objects_of(user, "alice-private")


@pytest.fixture
def bob_data(other_user):
    return objects_of(other_user, "bob-private")


def test_the_walk_finds_every_kind_of_route():
    found = {route.template for route in routes()}
    for expected in (
        "/",
        "/sessions/<uuid:session_id>/",
        "/goals/<int:goal_id>/",
        "/account/tokens/<int:token_id>/revoke/",
        "/search/",
        "/api/sessions/<session_id>",
        "/api/goal-checkpoints/<checkpoint_id>",
        "/api/search",
        "/admin/chat/session/<path:object_id>/change/",
        "/admin/<app_label>/",
        "/admin/<url>",
    ):
        assert expected in found, expected
    assert len(found) >= 100
    names = {route.name for route in routes()}
    assert set(PUBLIC_ROUTES) <= names, "a public route is gone: remove it from PUBLIC_ROUTES"


def test_anonymous_requests_are_refused_on_every_route(user, alice_data, api_gateway):
    client = Client()
    before = data_counts()
    walked = requests = 0
    for route in routes():
        url = route.url(parameters(user, alice_data, route))
        assert resolve(url.split("?")[0]).func == route.callback, (route.template, url)
        if route.name in PUBLIC_ROUTES:
            continue
        walked += 1
        refusals = []
        for method in route.methods():
            response = request(client, method, url)
            requests += 1
            status = response.status_code
            if status == 302:
                assert response["Location"].startswith(LOGIN_PAGES), (method, url, response["Location"])
            elif route.is_api:
                assert status in (401, 403, 404, 405), (method, url, status)
            else:
                assert status == 405, (method, url, status)
            assert b"alice-private" not in response.content, (method, url)
            if status != 405:
                refusals.append(status)
        assert refusals, f"{url}: every method answered 405, so nothing showed it needs a login"
    assert walked >= 100
    assert requests >= 300
    assert data_counts() == before


def test_public_routes_show_no_user_data(user, alice_data):
    client = Client()
    for route in routes():
        if route.name not in PUBLIC_ROUTES:
            continue
        response = client.get(route.url({}))
        assert response.status_code in (200, 302, 405), route.template
        assert b"alice-private" not in response.content, route.template
    health = client.get("/health")
    assert health.json() == {"status": "ok", "version": settings.OLLM_VERSION}


def _schema_value(schema: dict[str, Any], components: dict[str, Any]) -> Any:
    """The smallest valid value of an OpenAPI schema: required properties only."""
    if "$ref" in schema:
        return _schema_value(components[schema["$ref"].rsplit("/", 1)[-1]], components)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"]
            return _schema_value(options[0], components)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: _schema_value(props[name], components) for name in schema.get("required", [])}
    if kind == "array":
        return []
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        return max(schema.get("minimum", 1), 1)
    return "x"


def api_bodies() -> dict[tuple[str, str], Any]:
    """(method, route template) → a valid JSON body, from the OpenAPI document."""
    document = ninja_api.get_openapi_schema()
    components = document.get("components", {}).get("schemas", {})
    bodies = {}
    for path, operations in document["paths"].items():
        template = re.sub(r"\{(\w+)\}", r"<\1>", path)
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                bodies[(method, template)] = _schema_value(content["application/json"]["schema"], components)
    return bodies


def test_another_users_ids_answer_404_on_every_route_that_takes_one(
    user, alice_data, other_user, bob_data, api_gateway
):
    """Alice (not staff) asks for Bob's objects: 404 everywhere (the admin sends her to its login), never data."""
    client = Client()
    client.force_login(user)
    bodies = api_bodies()
    before = data_counts()
    bob_session = Session.objects.get(pk=bob_data["session"].pk)
    walked = 0
    for route in routes():
        if not route.parameters:
            continue
        url = route.url(parameters(other_user, bob_data, route))
        walked += 1
        not_found = 0
        for method in route.methods():
            response = request(client, method, url, bodies.get((method, route.template)))
            status = response.status_code
            assert b"bob-private" not in response.content, (method, url)
            if route.template.startswith("/admin/"):
                assert status == 302, (method, url, status)
                assert response["Location"].startswith("/admin/login/"), (method, url)
                not_found += 1
                continue
            assert status in (404, 405), (method, url, status, response.content[:200])
            not_found += status == 404
        assert not_found, f"{url}: no method reached the ownership check"
    assert walked >= 60
    assert data_counts() == before
    bob_session.refresh_from_db()
    assert bob_session.title == "bob-private title"
    assert ApiToken.objects.get(pk=bob_data["token"].pk).revoked_at is None
    assert not Decision.objects.filter(session=bob_session, description="x").exists()


# Routes for the site's operators only: everyone else gets 403.
STAFF_ONLY = {"/api/hosts"}


def test_pages_without_ids_never_list_another_users_data(user, alice_data, other_user, bob_data, api_gateway):
    client = Client()
    client.force_login(user)
    pages = 0
    for route in routes():
        if route.parameters or route.template.startswith("/admin/") or "get" not in route.methods():
            continue
        # The words of Bob's marker, which a leak would show as "bob-private".
        response = client.get(route.url({}), {"q": "bob private"})
        pages += 1
        if route.template in STAFF_ONLY:
            expected: tuple[int, ...] = (403,)  # alice is not staff (issue 49, item 4)
        else:
            expected = (401, 405) if route.is_token_only else (200, 302, 404, 405)
        assert response.status_code in expected, (route.template, response.status_code)
        assert b"bob-private" not in response.content, route.template
    assert pages >= 8
    found = client.get("/search/", {"q": "alice private"})
    assert b"alice-private" in found.content  # the search works: it finds Alice's own


def test_ids_in_query_strings_do_not_reach_another_users_data(user, alice_data, other_user, bob_data, api_gateway):
    client = Client()
    client.force_login(user)
    bob_message = Message.objects.filter(session=bob_data["session"], content="bob-private message").get()
    answers = [
        client.get("/api/search", {"q": "bob private", "session": bob_data["session"].pk}),
        client.get("/search/", {"q": "bob private", "session": bob_data["session"].pk}),
        client.get("/search/export/", {"q": "bob private"}),
        client.get(f"/sessions/{alice_data['session'].pk}/", {"around": bob_message.pk}),
        client.get(f"/api/sessions/{alice_data['session'].pk}/events", {"after": 0}),
    ]
    for response in answers:
        assert response.status_code == 200, response.request["PATH_INFO"]
        assert b"bob-private" not in response.content, response.request["PATH_INFO"]
    assert answers[0].json()["total"] == 0
    with zipfile.ZipFile(io.BytesIO(answers[2].content)) as archive:  # compressed: look inside
        assert archive.namelist() == []
    mine = client.get("/search/export/", {"q": "alice private"})
    with zipfile.ZipFile(io.BytesIO(mine.content)) as archive:
        assert archive.namelist() == [f"{alice_data['session'].pk}.json"]
    export = client.post("/sessions/export/", {"session": [bob_data["session"].pk]})
    assert export.status_code == 400  # none of the ticked sessions is hers


def test_every_unsafe_method_needs_the_csrf_token(user, alice_data, api_gateway):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    before = data_counts()
    checked = 0
    for route in routes():
        url = route.url(parameters(user, alice_data, route))
        for method in route.methods():
            if method not in UNSAFE_METHODS:
                continue
            response = request(client, method, url)
            checked += 1
            if route.is_token_only:
                assert response.status_code in (401, 405), (method, url, response.status_code)
                continue
            assert response.status_code == 403, (method, url, response.status_code)
            if route.path_view is not None:  # ninja's own check, not the middleware's
                assert response.json() == {"detail": "CSRF check Failed"}, (method, url)
    assert checked >= 400
    assert data_counts() == before
    assert client.get("/").status_code == 200  # still logged in: the logout without a token was refused too


# XSS: every text a user or a model writes, on every page that shows it.

PAYLOADS = ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "\"'><svg onload=alert(1)>")
RAW = (*PAYLOADS, "<svg onload", "<img src=x", "<script>")


def payload(tag: str) -> str:
    return f"xssprobe {tag} " + " ".join(PAYLOADS)


@pytest.fixture
def xss_session(user):
    """A session with a payload in every field a user or a model fills."""
    session = session_create(
        owner=user,
        model=payload("model"),
        context_size=16384,
        title=payload("title"),
        system_prompt=payload("system-prompt"),
    )
    session_update(session=session, summary_model=payload("summary-model"))
    message_create(session=session, role="user", content=payload("user-message"))
    compressed = message_create(session=session, role="assistant", content="An older reply to compress.")
    message_create(session=session, role="assistant", content=payload("assistant-message"))
    goal = goal_create(session=session, description=payload("goal"))
    goal_apply_markers(session=session, text=f"[NEXT] {payload('next-step')}")
    goal_checkpoint_set(goal=goal, description=payload("goal-checkpoint"))
    decision_record(session=session, description=payload("decision"), locked=True, goal=goal)
    artifact_record(session=session, path=payload("artifact"), action="created", goal=goal)
    compression_commit(
        session=session,
        message_ids=[compressed.pk],
        draft=CheckpointDraft(
            summary=payload("checkpoint-summary"),
            key_decisions=(payload("checkpoint-decision"),),
            files_modified=(payload("checkpoint-file"),),
            next_steps=(payload("checkpoint-next"),),
            facts=(Fact("path", payload("missing-fact")),),
        ),
    )
    snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason=payload("snapshot-reason"))
    event_record(session=session, type=EventType.COMPRESSION_ERROR, payload={"reason": payload("event-reason")})
    api_token_create(user=user, name=payload("token-name"))
    session.refresh_from_db()
    return session


def xss_pages(session: Session) -> dict[str, str]:
    snapshot = Snapshot.objects.filter(session=session).first()
    assert snapshot is not None
    return {
        "list": "/",
        "chat": f"/sessions/{session.pk}/",
        "context": f"/sessions/{session.pk}/context/",
        "meter": f"/sessions/{session.pk}/meter/",
        "timeline": f"/sessions/{session.pk}/timeline/",
        "history": f"/sessions/{session.pk}/history/",
        "delete": f"/sessions/{session.pk}/delete/",
        "restore": f"/snapshots/{snapshot.pk}/restore/",
        "search": "/search/?q=xssprobe",
        "search-query": "/search/?" + urlencode({"q": " ".join(PAYLOADS)}),
        "tokens": "/account/tokens/",
    }


# Which page must show which field (escaped). Every page is also checked for every raw payload.
SHOWN_ON = {
    "title": ("list", "chat", "context", "timeline", "history", "delete", "search"),
    "system-prompt": ("context",),
    "model": ("list", "chat", "history", "search"),
    "summary-model": ("chat",),
    "user-message": ("chat", "history", "context", "search"),
    "assistant-message": ("chat", "history", "context", "search"),
    "goal": ("chat", "context", "search"),
    "goal-checkpoint": ("chat", "context"),
    "next-step": ("chat", "context"),
    "decision": ("chat", "context", "search"),
    "artifact": ("chat", "context", "search"),
    "checkpoint-summary": ("context", "timeline", "search"),
    "checkpoint-decision": ("context",),
    "checkpoint-file": ("context",),
    "checkpoint-next": ("context",),
    "missing-fact": ("timeline",),
    "snapshot-reason": ("chat", "timeline"),
    "event-reason": ("timeline",),
    "token-name": ("tokens",),
}


def assert_escaped(content: str, where: str, shown: list[str]) -> None:
    for raw in RAW:
        assert raw not in content, f"{where}: {raw!r} is not escaped"
    for tag in shown:
        # From the tag on: search results put the matched "xssprobe" in <mark>.
        assert escape(payload(tag).removeprefix("xssprobe ")) in content, f"{where}: {tag} is not shown escaped"


def test_everything_users_and_models_write_is_escaped_on_every_page(user, xss_session, api_gateway):
    client = Client()
    client.force_login(user)
    pairs = 0
    for page, url in xss_pages(xss_session).items():
        response = client.get(url)
        assert response.status_code == 200, (page, response.status_code)
        shown = [tag for tag, pages in SHOWN_ON.items() if page in pages]
        assert_escaped(response.content.decode(), page, shown)
        pairs += len(shown)
    query = client.get(xss_pages(xss_session)["search-query"]).content.decode()
    assert f'value="{escape(" ".join(PAYLOADS))}"' in query  # the search box keeps the query, escaped
    assert pairs == sum(len(pages) for pages in SHOWN_ON.values())


def test_websocket_fragments_escape_too(user, xss_session):
    event = ContextEvent.objects.filter(session=xss_session, type="compression-error").get()
    reply = Message.objects.filter(session=xss_session, role="assistant").last()
    for kind, extra in (
        ("history", {}),
        ("turn_done", {"assistant_message": reply, "with_history": True}),
        ("event", {"event": {"type": event.type, "payload": event.payload}, "with_history": True}),
    ):
        html = chat_fragments(kind, xss_session.pk, **extra)
        shown = ["user-message", "assistant-message", "goal", "decision", "artifact"]
        if kind == "event":
            shown += ["event-reason", "snapshot-reason"]
        assert_escaped(html, kind, shown)
    user_message = Message.objects.get(session=xss_session, role="user")
    start = chat_fragments("turn_start", xss_session.pk, user_message=user_message, reply_id="reply-1")
    assert_escaped(start, "turn_start", ["user-message"])
    done = chat_fragments("turn_done", xss_session.pk, assistant_message=reply, reply_id="reply-1")
    assert_escaped(done, "turn_done without the history", ["assistant-message"])


def test_admin_pages_escape_too(django_user_model, xss_session):
    staff = django_user_model.objects.create_superuser(username="root", password="pw-root-123", email="r@example.com")
    client = Client()
    client.force_login(staff)
    checked = 0
    for route in routes():
        model = route.admin_model
        if model is None or route.template.endswith(("/add/", "/delete/", "/password/")):
            continue
        instance = model._default_manager.order_by("-pk").first()
        if instance is None:
            continue
        url = route.url({"object_id": instance.pk})
        response = client.get(url, follow=True)
        assert response.status_code == 200, url
        assert_escaped(response.content.decode(), url, [])
        checked += 1
    assert checked >= 30
    change = client.get(f"/admin/chat/session/{xss_session.pk}/change/").content.decode()
    assert escape(payload("title")) in change
    assert escape(payload("system-prompt")) in change


# The chat socket: anonymous, another user's session and a foreign origin are in test_chat_socket.py.


@pytest.mark.django_db(transaction=True)
async def test_a_socket_without_an_origin_is_refused(chat_session, user):
    communicator = await socket(chat_session.pk, user, origin=None)
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()  # the refused consumer still listens on the channel layer
    same_site = await socket(chat_session.pk, user)
    connected, _ = await same_site.connect()
    assert connected  # the same request with the site's origin gets in
    await same_site.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_staff_cannot_open_a_socket_on_someone_elses_session(chat_session, django_user_model):
    from asgiref.sync import sync_to_async

    staff = await sync_to_async(django_user_model.objects.create_superuser)(
        username="root", password="pw-root-123", email="r@example.com"
    )
    communicator = await socket(chat_session.pk, staff)
    connected, code = await communicator.connect()
    assert (connected, code) == (False, 4404)  # staff read sessions on the page; the socket writes
    await communicator.disconnect()
