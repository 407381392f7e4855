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
