"""Models, context sizes and sessions over the API."""

from __future__ import annotations

import pytest
from django.test import Client

from chat.models import Session
from chat.services.messages import message_create
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from engine.resources import context_profiles
from tests.support.model_server import UNTAGGED_MODEL

pytestmark = pytest.mark.django_db
JSON = "application/json"


def test_models_lists_every_backend_that_answers(api, use_gateway, embedded_backend, fake_ollama):
    use_gateway(Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=fake_ollama.url)))
    models = api.get("/api/models").json()
    by_name = {m["name"]: m for m in models}
    assert by_name[MODEL_NAME]["backend"] == "embedded"
    assert by_name[MODEL_NAME]["context_length"] == 8192
    ollama = [m for m in models if m["backend"] == "ollama"]
    assert ollama
    assert set(ollama[0]) == {"name", "backend", "parameter_size_b", "context_length"}


def test_models_without_ollama_lists_the_embedded_model_only(api):
    assert [m["name"] for m in api.get("/api/models").json()] == [MODEL_NAME]


def test_context_sizes_is_the_tier_table(api):
    sizes = api.get("/api/context-sizes").json()
    assert [s["size"] for s in sizes] == [p.size for p in context_profiles()]
    sixteen = next(s for s in sizes if s["size"] == 16384)
    assert sixteen == {"size": 16384, "ollama_context_size": 13600, "tier": 3, "tier_name": "Standard", "label": "16K"}


def test_create_read_update_delete_a_session(api, user):
    created = api.post(
        "/api/sessions",
        {"title": "Plan", "model": "llama3.2:3b", "context_size": 16384, "system_prompt": "Be brief."},
        content_type=JSON,
    )
    assert created.status_code == 201
    body = created.json()
    assert body["title"] == "Plan"
    assert (body["context_size"], body["max_tokens"], body["tier"], body["compression_count"]) == (16384, 13600, 3, 0)
    assert {"id", "created_at", "last_activity"} <= set(body)
    session = Session.objects.get(pk=body["id"])
    assert session.owner == user
    assert session.system_prompt_tokens > 0

    assert api.get(f"/api/sessions/{session.id}").json()["system_prompt"] == "Be brief."
    patched = api.patch(
        f"/api/sessions/{session.id}",
        {"title": "Renamed", "context_size": 8192, "summary_model": "qwen2.5:0.5b"},
        content_type=JSON,
    )
    assert patched.status_code == 200
    assert (patched.json()["title"], patched.json()["max_tokens"], patched.json()["tier"]) == ("Renamed", 6800, 2)
    assert patched.json()["summary_model"] == "qwen2.5:0.5b"
    assert patched.json()["system_prompt"] == "Be brief."

    assert api.delete(f"/api/sessions/{session.id}").status_code == 204
    assert not Session.objects.filter(pk=session.id).exists()
    assert api.get(f"/api/sessions/{session.id}").status_code == 404


def test_the_embedded_models_own_context_caps_max_tokens(api):
    body = api.post("/api/sessions", {"model": MODEL_NAME, "context_size": 16384}, content_type=JSON).json()
    assert body["max_tokens"] == 8192
    patched = api.patch(f"/api/sessions/{body['id']}", {"context_size": 32768}, content_type=JSON).json()
    assert patched["max_tokens"] == 8192
    assert patched["tier"] == 4


def test_a_smaller_context_re_evaluates_the_budget_at_once(api, chat_session, monkeypatch):
    scheduled = []
    monkeypatch.setattr(
        "chat.services.compression.schedule.compression_schedule", lambda **kwargs: scheduled.append(kwargs)
    )
    # About 7,700 tokens: under the 16K trigger (10,880), over the 8K one (5,436).
    for n in range(30):
        message_create(session=chat_session, role="assistant", content=f"Step {n}: " + "details " * 250)
    assert api.patch(f"/api/sessions/{chat_session.id}", {"title": "still fits"}, content_type=JSON).status_code == 200
    assert scheduled == []
    assert api.patch(f"/api/sessions/{chat_session.id}", {"context_size": 8192}, content_type=JSON).status_code == 200
    assert [call["session_id"] for call in scheduled] == [chat_session.id]


def test_sessions_are_paginated_and_only_the_callers(api, user, other_user):
    for n in range(5):
        session_create(owner=user, model="llama3.2:3b", context_size=8192, title=f"mine {n}")
    session_create(owner=other_user, model="llama3.2:3b", context_size=8192, title="theirs")
    page = api.get("/api/sessions?limit=2&offset=1").json()
    assert page["count"] == 5
    assert [s["title"] for s in page["items"]] == ["mine 3", "mine 2"]
    everything = api.get("/api/sessions").json()["items"]
    assert [s["title"] for s in everything] == [f"mine {n}" for n in range(4, -1, -1)]
    assert api.get("/api/sessions?limit=0").status_code == 422
    assert api.get("/api/sessions?limit=501").status_code == 422


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        ({"model": "llama3.2:3b", "context_size": 1000}, "context size 1000 is not offered"),
        ({"model": "   ", "context_size": 8192}, "Choose a model."),
        ({"model": "", "context_size": 8192}, "Choose a model."),
        ({"model": "llama3.2:3b", "context_size": 8192, "title": "t" * 201}, "title is 201 characters long"),
        ({"model": "x" * 201, "context_size": 8192}, "model is 201 characters long"),
        ({"model": "llama3.2:3b", "context_size": 2048, "system_prompt": "word " * 3000}, "The system prompt is"),
    ],
)
def test_invalid_sessions_are_refused_with_422(api, payload, detail):
    response = api.post("/api/sessions", payload, content_type=JSON)
    assert response.status_code == 422
    assert detail in response.json()["detail"]
    assert not Session.objects.exists()


def test_schema_errors_are_422_with_the_field(api, chat_session):
    missing = api.post("/api/sessions", {"context_size": 8192}, content_type=JSON)
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "payload", "model"]
    wrong_type = api.patch(f"/api/sessions/{chat_session.id}", {"context_size": "big"}, content_type=JSON)
    assert wrong_type.status_code == 422
    not_an_id = api.get("/api/sessions/not-a-uuid")
    assert not_an_id.status_code == 422
    assert not_an_id.json()["detail"][0]["loc"] == ["path", "session_id"]


def test_a_model_no_backend_has_is_refused(api, use_gateway, embedded_backend):
    use_gateway(Gateway(mode="embedded", embedded=embedded_backend, ollama=None))
    response = api.post("/api/sessions", {"model": "llama3.2:3b", "context_size": 8192}, content_type=JSON)
    assert response.status_code == 422
    assert "needs Ollama" in response.json()["detail"]


def test_a_patch_that_leaves_no_room_for_the_system_prompt_changes_nothing(api, user):
    session = session_create(owner=user, model="llama3.2:3b", context_size=8192, system_prompt="word " * 2000)
    response = api.patch(f"/api/sessions/{session.id}", {"context_size": 2048, "title": "x"}, content_type=JSON)
    assert response.status_code == 422
    session.refresh_from_db()
    assert (session.context_size, session.title) == (8192, "New conversation")


def test_bob_cannot_see_alices_sessions(bob_api, chat_session):
    assert bob_api.get("/api/sessions").json()["count"] == 0
    assert bob_api.get(f"/api/sessions/{chat_session.id}").status_code == 404
    assert Client().get(f"/api/sessions/{chat_session.id}").status_code == 401


def test_patch_sets_the_spec_configuration_and_refuses_bad_values(api, chat_session):
    url = f"/api/sessions/{chat_session.id}"
    settings = {"compression": {"strategy": "truncate", "preserve_recent": 512}, "snapshots": {"auto_threshold": 0.5}}
    response = api.patch(url, {"settings": settings, "summary_model": "qwen2.5:0.5b"}, content_type=JSON)
    assert response.status_code == 200
    assert response.json()["settings"] == settings
    assert response.json()["summary_model"] == "qwen2.5:0.5b"
    for bad, detail in [
        ({"compression": {"preserve_recent": 99_999}}, "more than this session can hold: at most 4,532"),
        ({"compression": {"summary_max_tokens": 4_000}}, "more than this session can hold: at most 2,266"),
        ({"snapshots": {"auto_threshold": 2}}, "snapshots.auto_threshold must be a number in (0, 1]"),
        ({"compression": {"strategy": "forget"}}, "compression.strategy must be one of summarize, truncate"),
        ({"speed": {}}, "unknown settings sections: speed"),
    ]:
        refused = api.patch(url, {"settings": bad, "title": "changed"}, content_type=JSON)
        assert refused.status_code == 422, bad
        assert detail in str(refused.json()["detail"]), refused.json()
    chat_session.refresh_from_db()
    assert chat_session.settings == settings
    assert chat_session.title == "New conversation"


def test_patch_takes_the_specs_key_names_and_stores_them_snake_case(api, chat_session):
    url = f"/api/sessions/{chat_session.id}"
    spec = {"compression": {"preserveRecent": 512, "summaryMaxTokens": 300}, "snapshots": {"autoThreshold": 0.5}}
    response = api.patch(url, {"settings": spec}, content_type=JSON)
    assert response.status_code == 200, response.json()
    stored = {"compression": {"preserve_recent": 512, "summary_max_tokens": 300}, "snapshots": {"auto_threshold": 0.5}}
    assert response.json()["settings"] == stored
    chat_session.refresh_from_db()
    assert chat_session.settings == stored
    both = {"compression": {"preserveRecent": 512, "preserve_recent": 256}}
    refused = api.patch(url, {"settings": both}, content_type=JSON)
    assert refused.status_code == 422
    assert "preserveRecent and preserve_recent" in str(refused.json()["detail"])
    # The session's limits apply to the spec's spelling too.
    too_big = api.patch(url, {"settings": {"compression": {"preserveRecent": 99_999}}}, content_type=JSON)
    assert too_big.status_code == 422
    assert "compression.preserve_recent is 99,999 tokens" in str(too_big.json()["detail"])


def test_every_door_starts_a_session_the_same_way(user, owner_client, api, use_gateway, fake_ollama, monkeypatch):
    """Page, API, terminal and import all ask Ollama about the model (``session_start``): a model
    whose tag says nothing of its size gets the size /api/show reports, and the same score."""
    import io
    import json

    from django.core.management import call_command

    use_gateway(Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=60)))
    form = {"model": UNTAGGED_MODEL, "context_size": 4096, "title": "page", "system_prompt": "", "goal": ""}
    assert owner_client.post("/sessions/new/", form).status_code == 302
    payload = {"model": UNTAGGED_MODEL, "context_size": 4096, "title": "api"}
    assert api.post("/api/sessions", payload, content_type="application/json").status_code == 201
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    call_command("chat", user="alice", model=UNTAGGED_MODEL, context_size=4096, stdout=io.StringIO())
    file = {"model": UNTAGGED_MODEL, "messages": [{"role": "user", "parts": [{"type": "text", "text": "Hi"}]}]}
    imported = api.post("/api/sessions/import?context_size=4096", json.dumps(file), content_type="application/json")
    assert imported.status_code == 201

    sessions = Session.objects.filter(owner=user)
    assert sessions.count() == 4
    # The served model's size (135M) and its own context length, whichever door.
    assert set(sessions.values_list("model_parameter_size_b", "reliability_score", "max_tokens")) == {
        (0.135, sessions[0].reliability_score, sessions[0].max_tokens)
    }
