"""Fuzz every operation of the API from its own OpenAPI schema: no input may cause a server error.

Bounded so it runs in the suite: a few examples per operation. Path ids point
at real objects of the caller's half the time, so the fuzzer gets past the 404s.
"""

from __future__ import annotations

import json

import pytest
import schemathesis
from django.core import signals
from django.core.cache import cache
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ninja.responses import NinjaJSONEncoder
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from chat.models import Goal, Session, Snapshot
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.goals import artifact_record, decision_record, goal_checkpoint_set, goal_create
from chat.services.messages import message_create
from chat.services.sessions import session_create
from chat.services.snapshots import snapshot_create
from engine.llm.embedded import MODEL_NAME
from engine.llm.gateway import Gateway
from ollm_site.api import api as ninja_api

# The document as /api/openapi.json serves it to a logged-in user (anonymous callers are sent to log in).
schema = schemathesis.openapi.from_dict(json.loads(json.dumps(ninja_api.get_openapi_schema(), cls=NinjaJSONEncoder)))
schema.app = get_wsgi_application()
EXAMPLES_PER_OPERATION = 8


def _build_world(user):
    session = session_create(
        owner=user,
        model=MODEL_NAME,
        context_size=4096,
        system_prompt="Be brief.",
        # A forced compression (a rollover in Tier 1) then asks the model for a few tokens only.
        settings={"compression": {"summary_max_tokens": 16}, "snapshots": {"auto_create": False}},
    )
    message_create(session=session, role="user", content="Plan it")
    reply = message_create(session=session, role="assistant", content="Step one, then step two.")
    compression_commit(session=session, message_ids=[reply.id], draft=CheckpointDraft(summary="Two steps."))
    goal = goal_create(session=session, description="Ship")
    return {
        "session_id": str(session.id),
        "goal_id": goal.id,
        "checkpoint_id": goal_checkpoint_set(goal=goal, description="Tests").id,
        "decision_id": decision_record(session=session, description="Use SQLite", goal=goal).id,
        "artifact_id": artifact_record(session=session, path="a.py", action="created", goal=goal).id,
        "snapshot_id": snapshot_create(session=session, kind=Snapshot.Kind.MANUAL).id,
    }


@pytest.fixture
def world(user, use_gateway, embedded_backend, settings):
    """One of everything, owned by the token's user, made again when a fuzzed DELETE removed it.

    Turns run on the real embedded model, with one-token replies to keep the fuzzing quick.
    """
    use_gateway(Gateway(mode="embedded", embedded=embedded_backend, ollama=None))
    settings.OLLM_REPLY_MAX_TOKENS = 1
    current = _build_world(user)

    def get():
        nonlocal current
        if not Goal.objects.filter(pk=current["goal_id"], session_id=current["session_id"]).exists():
            current = _build_world(user)
        return current

    return get


@pytest.fixture
def wsgi_requests_keep_the_test_connection():
    """Django's test Client keeps the test's database connection open across requests; a WSGI call
    would close it at the end of each request, as a server does."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_no_input_causes_a_server_error(case, world, api_token, wsgi_requests_keep_the_test_connection):
    ids = world()
    params = case.path_parameters or {}
    for name, value in params.items():
        if name in ids and (name == "session_id" or sum(map(ord, str(value))) % 2 == 0):
            params[name] = ids[name]
    response = case.call(headers={"Authorization": f"Bearer {api_token}"})
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
    assert response.status_code < 500


@pytest.mark.django_db
def test_the_fuzzed_world_is_reachable_and_rebuilt(client, world, api_token):
    """The substitution above only helps if the objects answer 200 with the token."""
    headers = {"Authorization": f"Bearer {api_token}"}
    ids = world()
    assert client.get(f"/api/sessions/{ids['session_id']}/goals", headers=headers).status_code == 200
    assert client.delete(f"/api/sessions/{ids['session_id']}", headers=headers).status_code == 204
    rebuilt = world()
    assert rebuilt["session_id"] != ids["session_id"]
    assert Session.objects.filter(pk=rebuilt["session_id"]).exists()


# Values Python's json reads but the database cannot store or Python cannot use, at places of the
# session file: each must be a 422 that names its place, never a 500 (schemathesis only sends JSON).
HOSTILE_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "7" * 5_000, "-" + "7" * 5_000]
HOSTILE_TIMES = ['"0001-01-01T00:00:00+05:00"', '"9999-12-31T23:59:59-05:00"', '"0001-01-01T00:00:00+00:01"']
NUMBER_PLACES = {
    "file.metadata.contextSize": lambda f, v: f["metadata"].update(contextSize=v),
    "file.metadata.tokenCount": lambda f, v: f["metadata"].update(tokenCount=v),
    "file.model": lambda f, v: f.update(model=v),
    "file.toolCalls[0].args": lambda f, v: f["toolCalls"][0]["args"].update(deep={"list": [1, v]}),
    "file.toolCalls[0].result.llmContent": lambda f, v: f["toolCalls"][0]["result"].update(llmContent=[v]),
    "file.toolCalls[0].result.data": lambda f, v: f["toolCalls"][0]["result"].update(data={"v": v}),
}
TIME_PLACES = {
    "file.startTime": lambda f, v: f.update(startTime=v),
    "file.lastActivity": lambda f, v: f.update(lastActivity=v),
    "file.messages[0].timestamp": lambda f, v: f["messages"][0].update(timestamp=v),
    "file.toolCalls[0].timestamp": lambda f, v: f["toolCalls"][0].update(timestamp=v),
}
MARK = "@@hostile@@"


def _file_with(place, value):
    data = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        "toolCalls": [{"id": "c", "name": "n", "args": {}, "result": {"llmContent": "ok"}}],
        "metadata": {},
    }
    place(data, MARK)
    return json.dumps(data).replace(f'"{MARK}"', value)


@pytest.mark.django_db
@given(
    where=st.one_of(
        st.tuples(st.sampled_from(sorted(NUMBER_PLACES)), st.sampled_from(HOSTILE_NUMBERS)),
        st.tuples(st.sampled_from(sorted(TIME_PLACES)), st.sampled_from(HOSTILE_TIMES)),
    )
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_unreadable_numbers_and_times_in_an_import_are_422_at_their_place(client, api_token, where):
    name, value = where
    place = NUMBER_PLACES.get(name) or TIME_PLACES[name]
    cache.clear()  # the per-minute import limit
    response = client.post(
        "/api/sessions/import",
        _file_with(place, value),
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_token}"},
    )
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith(f"{name}: ")
    assert not Session.objects.exists()


# --- Hypothesis over the drop-in endpoints, REST bodies of the wrong types, search and the forms (issue 49) ---
# Each property: whatever comes in, no 500 comes back, and a refusal is in the API's own error shape. The
# examples stay few: the model, when a request gets that far, answers one token (OLLM_REPLY_MAX_TOKENS = 1).

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
# Text a form or a query string can carry: any character but an unpaired surrogate (UTF-8 cannot send one).
FORM_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
OPENAI_FIELDS = (
    "messages", "tools", "tool_choice", "functions", "function_call", "stop", "n", "user", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "seed", "frequency_penalty", "presence_penalty",
    "stream_options", "response_format", "num_ctx", "logprobs",
)  # fmt: skip
OLLAMA_FIELDS = ("messages", "tools", "tool_choice", "options", "format", "keep_alive", "think", "prompt", "system",
                 "context", "raw", "template", "images")  # fmt: skip
OLLAMA_OPTIONS = ("num_predict", "num_ctx", "stop", "temperature", "top_k", "seed", "mirostat", "use_mmap")
HELLO = [{"role": "user", "content": "Hi"}]
LITTLE = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def one_token_replies(api_gateway, settings):
    settings.OLLM_REPLY_MAX_TOKENS = 1


def _post_json(client, path, body, **extra):
    return client.post(path, json.dumps(body), content_type="application/json", **extra)


@pytest.mark.django_db
@given(
    fields=st.dictionaries(st.sampled_from(OPENAI_FIELDS), JSON_VALUES, max_size=3),
    keep_messages=st.booleans(),
)
@LITTLE
def test_any_openai_body_finds_no_server_error(client, api_token, one_token_replies, fields, keep_messages):
    body = {"model": MODEL_NAME, "stream": False, **({"messages": HELLO} if keep_messages else {}), **fields}
    response = _post_json(client, "/v1/chat/completions", body, headers={"Authorization": f"Bearer {api_token}"})
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        assert isinstance(response.json()["error"]["message"], str)


@pytest.mark.django_db
@given(
    path=st.sampled_from(["/ollama/api/chat", "/ollama/api/generate"]),
    fields=st.dictionaries(st.sampled_from(OLLAMA_FIELDS), JSON_VALUES, max_size=3),
    options=st.dictionaries(st.sampled_from(OLLAMA_OPTIONS), JSON_VALUES, max_size=2),
)
@LITTLE
def test_any_ollama_body_finds_no_server_error(client, api_token, one_token_replies, path, fields, options):
    asked = {"messages": HELLO} if path.endswith("chat") else {"prompt": "Hi"}
    body = {"model": MODEL_NAME, "stream": False, **asked, **fields, **({"options": options} if options else {})}
    response = _post_json(client, path, body, headers={"Authorization": f"Bearer {api_token}"})
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        assert isinstance(response.json()["error"], str)


REST_BODIES = {
    "POST /api/sessions": ("title", "model", "context_size", "system_prompt"),
    "PATCH /api/sessions/{session_id}": ("title", "context_size", "system_prompt", "summary_model", "settings"),
    "POST /api/sessions/{session_id}/branch": ("message_id", "position"),
    "POST /api/sessions/{session_id}/messages": ("content", "max_tokens"),
    "POST /api/goals/{goal_id}/decisions": ("description", "locked"),
    "PATCH /api/goals/{goal_id}": ("description", "priority", "status"),
}


@pytest.mark.django_db
@given(data=st.data(), operation=st.sampled_from(sorted(REST_BODIES)))
@LITTLE
def test_rest_bodies_of_any_types_find_no_server_error(client, api_token, world, data, operation):
    ids = world()
    method, template = operation.split(" ")
    body = data.draw(st.dictionaries(st.sampled_from(REST_BODIES[operation]), JSON_VALUES, max_size=3))
    path = template.format(**ids)
    headers = {"Authorization": f"Bearer {api_token}"}
    call = client.post if method == "POST" else client.patch
    response = call(path, json.dumps(body), content_type="application/json", headers=headers)
    assert response.status_code < 500, response.content
    if response.status_code in (400, 422):
        assert response.json()["detail"]


SEARCH_PARAMS = ("q", "session", "model", "since", "until", "role", "kind", "locked", "page", "page_size")


@pytest.mark.django_db
@given(
    path=st.sampled_from(["/api/search", "/search/", "/search/export/"]),
    params=st.dictionaries(st.sampled_from(SEARCH_PARAMS), FORM_TEXT, max_size=4),
)
@LITTLE
def test_any_search_finds_no_server_error(client, user, api_token, path, params):
    if path.startswith("/api/"):
        response = client.get(path, params, headers={"Authorization": f"Bearer {api_token}"})
    else:
        client.force_login(user)
        response = client.get(path, params)
    assert response.status_code < 500, response.content[:500]


FORMS = {
    "/sessions/new/": ("title", "model", "context_size", "system_prompt"),
    "/accounts/login/": ("username", "password", "next"),
}


@pytest.mark.django_db
@given(data=st.data(), path=st.sampled_from(sorted(FORMS)))
@LITTLE
def test_any_form_post_finds_no_server_error(client, user, api_gateway, data, path):
    form = data.draw(st.dictionaries(st.sampled_from(FORMS[path]), FORM_TEXT, max_size=4))
    if not path.startswith("/accounts/"):
        client.force_login(user)
    response = client.post(path, form)
    assert response.status_code < 500, response.content[:500]
