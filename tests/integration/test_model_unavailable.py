"""A session whose model is not served here (issue 19): an import never refuses a file for it, the
session says so (API and page) and offers the models served, a turn names the model and how to
switch, and a switch (PATCH, or one click on the page) makes the next turn work."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from chat.models import Message, Session
from chat.selectors.sessions import models_served_key
from engine.llm.embedded import MODEL_NAME
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from tests.factories import CLI_FILE, GREEDY_REPLIES, cli_file, cli_file_history, frames_until, socket
from tests.support.model_server import SERVED_MODEL

JSON = "application/json"
NEEDS_OLLAMA = "model llama3.2:3b needs Ollama, which OLLM_LLM_BACKEND=embedded turns off"
# Short replies keep the turns quick.
QUICK = override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=8)


def _time(text):
    return datetime.fromisoformat(text).astimezone(UTC)


def _other_file(model):
    """A file of another tool whose model is not served here, with a tool call between its messages."""
    return {
        "sessionId": "other-tool-session-1",
        "startTime": "2026-02-01T09:00:00.000Z",
        "lastActivity": "2026-02-01T09:05:00.000Z",
        "model": model,
        "provider": "ollama",
        "messages": [
            {
                "role": "user",
                "parts": [{"type": "text", "text": "List the files."}],
                "timestamp": "2026-02-01T09:00:00.000Z",
            },
            {
                "role": "assistant",
                "parts": [{"type": "text", "text": "Two files."}],
                "timestamp": "2026-02-01T09:00:09.000Z",
            },
        ],
        "toolCalls": [
            {
                "id": "call_1",
                "name": "ls",
                "args": {"path": "."},
                "result": {"llmContent": "a.txt\nb.txt"},
                "timestamp": "2026-02-01T09:00:05.000Z",
            }
        ],
        "metadata": {"tokenCount": 20, "compressionCount": 0},
    }


@pytest.fixture
def embedded_only(use_gateway, embedded_backend):
    """OLLM_LLM_BACKEND=embedded: the bundled model only (``embedded/smollm2-135m``)."""
    return use_gateway(Gateway(mode="embedded", embedded=embedded_backend, ollama=None))


def _import_cli_file(api):
    upload = SimpleUploadedFile("5b0c7d2e.json", CLI_FILE.read_bytes(), content_type=JSON)
    response = api.post("/api/sessions/import", {"file": upload})
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.django_db
def test_the_cli_file_is_imported_whole_with_the_embedded_backend_only(api, embedded_only):
    recorded = cli_file()
    body = _import_cli_file(api)
    assert (body["model"], body["model_available"], body["available_models"]) == ("llama3.2:3b", False, [MODEL_NAME])
    session = Session.objects.get(pk=body["id"])
    history = list(session.messages.order_by("position"))
    assert [(m.role, m.content, m.created_at) for m in history] == cli_file_history(recorded)
    assert (history[1].tool_call_id, history[1].tool_name, history[1].tool_args) == (
        "call_8f2a41c0",
        "read_file",
        {"path": "packages/core/src/index.ts"},
    )
    assert (session.created_at, session.last_activity) == (
        _time(recorded["startTime"]),
        _time(recorded["lastActivity"]),
    )
    # Every read of the session says so: the detail and the list.
    detail = api.get(f"/api/sessions/{session.pk}").json()
    assert (detail["model_available"], detail["available_models"]) == (False, [MODEL_NAME])
    listed = api.get("/api/sessions").json()["items"]
    assert [(s["id"], s["model_available"]) for s in listed] == [(str(session.pk), False)]


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["qwen2.5:7b", "embedded/some-other-model"])
def test_a_file_naming_a_model_no_backend_has_is_imported_whole(api, embedded_only, model):
    response = api.post("/api/sessions/import", _other_file(model), content_type=JSON)
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["model"], body["model_available"], body["available_models"]) == (model, False, [MODEL_NAME])
    stored = Message.objects.filter(session_id=body["id"]).order_by("position")
    assert [(m.role, m.content, m.tool_name, m.created_at) for m in stored] == [
        ("user", "List the files.", "", _time("2026-02-01T09:00:00.000Z")),
        ("tool", "a.txt\nb.txt", "ls", _time("2026-02-01T09:00:05.000Z")),
        ("assistant", "Two files.", "", _time("2026-02-01T09:00:09.000Z")),
    ]


@pytest.mark.django_db
def test_a_session_whose_model_is_served_says_so(api, embedded_only):
    created = api.post("/api/sessions", {"model": MODEL_NAME, "context_size": 2048}, content_type=JSON)
    assert created.status_code == 201, created.content
    assert (created.json()["model_available"], created.json()["available_models"]) == (True, [MODEL_NAME])
    # A new session is still refused a model no backend has: only data is never refused.
    refused = api.post("/api/sessions", {"model": "llama3.2:3b", "context_size": 2048}, content_type=JSON)
    assert refused.status_code == 422
    assert NEEDS_OLLAMA in refused.json()["detail"]


@pytest.mark.django_db
@QUICK
def test_a_turn_before_switching_names_the_model_then_a_patch_makes_the_next_turn_work(api, embedded_only):
    body = _import_cli_file(api)
    url = f"/api/sessions/{body['id']}"
    refused = api.post(f"{url}/messages", {"content": "Still there?"}, content_type=JSON)
    assert refused.status_code == 409, refused.content
    detail = refused.json()["detail"]
    assert detail.startswith(f"The model of this session, llama3.2:3b, is not available here: {NEEDS_OLLAMA}.")
    assert "Your message is saved." in detail
    assert f'PATCH /api/sessions/{body["id"]} {{"model": "{MODEL_NAME}"}}' in detail
    # The message was stored first; no reply was.
    last = Message.objects.filter(session_id=body["id"]).order_by("-position").first()
    assert last is not None
    assert (last.role, last.content, Message.objects.filter(session_id=body["id"]).count()) == (
        "user",
        "Still there?",
        6,
    )

    # Another setting may change while the model is not served: it is not a switch.
    resized = api.patch(url, {"context_size": 8192}, content_type=JSON)
    assert resized.status_code == 200, resized.content
    assert (resized.json()["context_size"], resized.json()["model_available"]) == (8192, False)
    # A switch to a model no backend has is refused, and changes nothing.
    wrong = api.patch(url, {"model": "mistral:7b"}, content_type=JSON)
    assert wrong.status_code == 422
    assert Session.objects.get(pk=body["id"]).model == "llama3.2:3b"

    switched = api.patch(url, {"model": MODEL_NAME}, content_type=JSON)
    assert switched.status_code == 200, switched.content
    assert (switched.json()["model"], switched.json()["model_available"]) == (MODEL_NAME, True)
    answered = api.post(f"{url}/messages", {"content": "Which file was read?"}, content_type=JSON)
    assert answered.status_code == 200, answered.content
    assert answered.json()["assistant_message"]["role"] == "assistant"
    assert answered.json()["assistant_message"]["content"].strip()
    # Nothing of the imported history was lost on the way.
    assert Message.objects.filter(session_id=body["id"]).count() == 8


@pytest.mark.django_db
def test_the_page_says_the_model_is_not_available_and_one_click_switches_it(api, owner_client, user, embedded_only):
    body = _import_cli_file(api)
    page = owner_client.get(f"/sessions/{body['id']}/").content.decode()
    banner = re.search(r'<div id="model-banner">(.*?)</div>', page, re.S)
    assert banner is not None
    text = banner.group(1)
    assert "Model not available:" in text
    assert "<code>llama3.2:3b</code> is not served here" in text
    # Why (the operator's settings) is for staff: the person chatting is told what to do.
    assert "OLLM_LLM_BACKEND" not in text
    user.is_staff = True
    user.save()
    staff_page = owner_client.get(f"/sessions/{body['id']}/").content.decode()
    assert NEEDS_OLLAMA in staff_page
    switch_url = f"/sessions/{body['id']}/model/"
    assert f'hx-post="{switch_url}"' in text
    assert f'<button type="submit" name="model" value="{MODEL_NAME}">{MODEL_NAME}</button>' in text
    # It sits near the composer: after the history, before the form.
    assert page.index('id="history"') < page.index('id="model-banner"') < page.index('id="composer"')

    bad = owner_client.post(switch_url, {"model": "mistral:7b"}, headers={"HX-Request": "true"})
    assert bad.status_code == 422
    assert "mistral:7b" in bad.content.decode()
    assert Session.objects.get(pk=body["id"]).model == "llama3.2:3b"

    clicked = owner_client.post(switch_url, {"model": MODEL_NAME}, headers={"HX-Request": "true"})
    assert clicked.status_code == 200
    assert clicked["HX-Redirect"] == f"/sessions/{body['id']}/"
    assert Session.objects.get(pk=body["id"]).model == MODEL_NAME
    after = owner_client.get(f"/sessions/{body['id']}/").content.decode()
    assert "Model not available" not in after
    assert Message.objects.filter(session_id=body["id"]).count() == 5


@pytest.mark.django_db
def test_only_the_owner_may_switch_and_a_viewer_sees_no_switch(api, client, other_user, embedded_only):
    body = _import_cli_file(api)
    client.force_login(other_user)
    assert client.post(f"/sessions/{body['id']}/model/", {"model": MODEL_NAME}).status_code == 404
    assert Session.objects.get(pk=body["id"]).model == "llama3.2:3b"


@pytest.mark.django_db(transaction=True)
@QUICK
async def test_on_the_page_a_turn_says_so_in_the_chat_and_retry_answers_after_the_switch(api, user, embedded_only):
    from asgiref.sync import sync_to_async

    body = await sync_to_async(_import_cli_file)(api)
    communicator = await socket(body["id"], user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"action": "send", "message": "Still there?"}))
    frames = await frames_until(communicator, 'class="status error"')
    assert "The model of this session, llama3.2:3b, is not available on this server now" in frames[-1]
    assert f"Choose one that is ({MODEL_NAME}) with Switch model on the chat page, then Retry." in frames[-1]
    # The person chatting is told what to do on the page, not the operator's settings or the API's call.
    assert "OLLM_LLM_BACKEND" not in frames[-1]
    assert "PATCH" not in frames[-1]
    assert 'value="retry"' in frames[-1]
    assert await Message.objects.filter(session_id=body["id"], role="user", content="Still there?").aexists()

    switched = await sync_to_async(api.patch)(f"/api/sessions/{body['id']}", {"model": MODEL_NAME}, content_type=JSON)
    assert switched.status_code == 200
    await communicator.send_to(text_data=json.dumps({"action": "retry"}))
    frames = await frames_until(communicator, 'hx-swap-oob="outerHTML:#reply-2"')
    await communicator.disconnect()
    reply = await Message.objects.filter(session_id=body["id"]).order_by("-position").afirst()
    assert reply is not None
    assert reply.role == "assistant"
    # The retry answered the stored message: it is there once.
    assert await Message.objects.filter(session_id=body["id"], content="Still there?").acount() == 1


@pytest.mark.django_db
@QUICK
def test_a_model_whose_ollama_is_down_is_not_available_until_ollama_comes_back(
    api, use_gateway, embedded_backend, closed_port_url, fake_ollama
):
    """Derived when read, never stored: nothing is switched, and the session's own model serves again."""
    down = use_gateway(
        Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=closed_port_url, timeout=5))
    )
    response = api.post("/api/sessions/import", _other_file(SERVED_MODEL), content_type=JSON)
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["model_available"], body["available_models"]) == (False, [MODEL_NAME])
    url = f"/api/sessions/{body['id']}"
    refused = api.post(f"{url}/messages", {"content": "Hello?"}, content_type=JSON)
    # Its backend is down, not turned off: 503, and the message names the model and the way out.
    assert refused.status_code == 503, refused.content
    detail = refused.json()["detail"]
    assert f"{SERVED_MODEL}, is not available here: Ollama is not reachable now" in detail
    # The user reads that the model is unavailable, never where its host is (issue 49, item 5).
    assert closed_port_url not in detail
    assert "127.0.0.1" not in detail
    assert f'"model": "{MODEL_NAME}"' in detail
    assert down.mode == "auto"

    back = use_gateway(
        Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=fake_ollama.url, timeout=60))
    )
    # What the cache still holds from just before Ollama came back (kept a few seconds)...
    cache.set(models_served_key(back), [MODEL_NAME])
    assert api.get(url).json()["model_available"] is False
    # ...does not refuse a turn: the turn asks again, and its answer is what the session shows next.
    answered = api.post(f"{url}/messages", {"content": "Hello again?"}, content_type=JSON)
    assert answered.status_code == 200, answered.content
    detail = api.get(url).json()
    assert (detail["model"], detail["model_available"]) == (SERVED_MODEL, True)
    assert SERVED_MODEL in detail["available_models"]
