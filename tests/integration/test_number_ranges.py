"""Every number an archive or a session file gives has a range (issue 36): one outside it is refused with 422
naming its place, never stored, and none makes a page fail; extreme values anywhere find no 500."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import cache
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chat.formats.archive_file import ArchiveState
from chat.formats.file_checks import within_ranges
from chat.models import Session, Snapshot
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.files import session_archive
from chat.services.messages import message_create
from chat.services.sessions import session_create
from chat.services.snapshots import snapshot_create
from engine.llm.embedded import MODEL_NAME

pytestmark = pytest.mark.django_db
JSON = "application/json"


def _archive_of_a_compressed_session(user) -> dict[str, Any]:
    session = session_create(owner=user, model=MODEL_NAME, context_size=4096, system_prompt="Be brief.")
    message_create(session=session, role="user", content="Plan it")
    reply = message_create(session=session, role="assistant", content="Step one, then step two.")
    compression_commit(session=session, message_ids=[reply.id], draft=CheckpointDraft(summary="Two steps."))
    snapshot_create(session=session, kind=Snapshot.Kind.MANUAL)
    archive = session_archive(session=Session.objects.get(pk=session.pk))
    session.delete()
    return archive


@pytest.fixture
def archive(user) -> dict[str, Any]:
    return _archive_of_a_compressed_session(user)


def _setter(*path: str | int) -> Callable[[dict[str, Any], Any], None]:
    def put(data: dict[str, Any], value: Any) -> None:
        target: Any = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return put


# Every number of the archive, by the name a refusal gives its place.
PLACES = {
    "archive.state.max_tokens": _setter("state", "max_tokens"),
    "archive.state.reliability_score": _setter("state", "reliability_score"),
    "archive.state.compression_count": _setter("state", "compression_count"),
    "archive.state.model_parameter_size_b": _setter("state", "model_parameter_size_b"),
    "archive.state.system_prompt_tokens": _setter("state", "system_prompt_tokens"),
    "archive.state.context_version": _setter("state", "context_version"),
    "archive.state.compressed_through": _setter("state", "compressed_through"),
    "archive.session.metadata.contextSize": _setter("session", "metadata", "contextSize"),
    "archive.session.metadata.tokenCount": _setter("session", "metadata", "tokenCount"),
    "archive.session.metadata.compressionCount": _setter("session", "metadata", "compressionCount"),
    "archive.messages[0].tokens": _setter("messages", 0, "tokens"),
    "archive.messages[0].context_version": _setter("messages", 0, "context_version"),
    "archive.checkpoints[0].original_tokens": _setter("checkpoints", 0, "original_tokens"),
    "archive.checkpoints[0].current_tokens": _setter("checkpoints", 0, "current_tokens"),
    "archive.checkpoints[0].compression_count": _setter("checkpoints", 0, "compression_count"),
    "archive.checkpoints[0].number": _setter("checkpoints", 0, "number"),
    "archive.checkpoints[0].retention": _setter("checkpoints", 0, "retention"),
    "archive.checkpoints[0].revisions[0].tokens": _setter("checkpoints", 0, "revisions", 0, "tokens"),
    "archive.snapshots[0].token_count": _setter("snapshots", 0, "token_count"),
    "archive.snapshots[0].tier": _setter("snapshots", 0, "tier"),
    "archive.snapshots[0].state.session.max_tokens": _setter("snapshots", 0, "state", "session", "max_tokens"),
}


def _import(client, api_token, data: dict[str, Any] | str) -> Any:
    cache.clear()  # the per-minute import limit
    body = data if isinstance(data, str) else json.dumps(data)
    return client.post(
        "/api/sessions/import", body, content_type=JSON, headers={"Authorization": f"Bearer {api_token}"}
    )


def test_the_archive_imports_as_it_is(client, api_token, archive):
    """The ranges refuse nothing an export writes (else the cases below would prove nothing)."""
    assert _import(client, api_token, archive).status_code == 201


@pytest.mark.parametrize(
    ("place", "value", "problem"),
    [
        ("archive.state.reliability_score", -1e308, "must be at least 0"),
        ("archive.state.reliability_score", 1.5, "must be at most 1"),
        ("archive.state.max_tokens", 2**63, "must be at most 1,048,576"),
        ("archive.state.max_tokens", 10**15, "must be at most 1,048,576"),
        ("archive.state.compression_count", 10**9, "must be at most 1,000,000"),
        ("archive.state.model_parameter_size_b", -5, "must be greater than 0"),
        ("archive.state.context_version", 2**64, "must be at most 9,223,372,036,854,775,807"),
        ("archive.messages[0].tokens", 2**70, "must be at most 4,000,000"),
        ("archive.messages[0].tokens", -1, "must be at least 0"),
        ("archive.checkpoints[0].retention", 2.0, "must be at most 1"),
        ("archive.snapshots[0].tier", 2**40, "must be at most 32,767"),
        ("archive.session.metadata.contextSize", 10**15, "must be at most 1,048,576"),
        ("archive.session.metadata.contextSize", 1, "context size 1 is not offered"),
        ("archive.session.metadata.compressionCount", -3, "must be at least 0"),
    ],
)
def test_a_number_outside_its_range_is_422_at_its_place(client, api_token, archive, place, value, problem):
    PLACES[place](archive, value)
    response = _import(client, api_token, archive)
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith(f"{place}: {problem}")
    assert not Session.objects.exists()


EXTREME_NUMBERS = st.one_of(
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63, -(2**63), 2**64, 10**30, 1e308, -1e308, 5e-324, 0.5]),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
)


@given(changes=st.lists(st.tuples(st.sampled_from(sorted(PLACES)), EXTREME_NUMBERS), min_size=1, max_size=3))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_extreme_numbers_anywhere_in_an_archive_find_no_server_error(client, admin_client, api_token, archive, changes):
    data = copy.deepcopy(archive)
    for place, value in changes:
        PLACES[place](data, value)
    response = _import(client, api_token, data)
    assert response.status_code in (201, 422), response.content
    if response.status_code == 422:
        assert response.json()["detail"].startswith("archive."), response.content
        return
    # Whatever was accepted, the admin shows it.
    session_id = response.json()["id"]
    assert admin_client.get("/admin/chat/session/").status_code == 200
    assert admin_client.get(f"/admin/chat/session/{session_id}/change/").status_code == 200
    Session.objects.filter(pk=session_id).delete()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "1" * 5000])
def test_a_number_that_is_not_json_is_422_at_its_place(client, api_token, archive, literal):
    archive["state"]["reliability_score"] = "@@number@@"
    response = _import(client, api_token, json.dumps(archive).replace('"@@number@@"', literal))
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith("archive.state.reliability_score: ")


def test_an_export_brings_stored_numbers_into_their_ranges_exactly():
    values = {
        "context_version": 2**64,
        "compression_count": -4,
        "reliability_score": float("nan"),
        "model_parameter_size_b": -5.0,
        "max_tokens": 0,
        "summary_model": "kept",
    }
    assert within_ranges(ArchiveState, values) == {
        "context_version": 2**63 - 1,
        "compression_count": 0,
        "reliability_score": 0.0,
        "model_parameter_size_b": None,
        "max_tokens": 1,
        "summary_model": "kept",
    }
