"""The Ollama (/ollama/) and OpenAI (/v1/) endpoints in process: who may call them, how a request finds its
session, and errors in each API's own shape. The real clients over HTTP: test_drop_in_clients.py."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from accounts.services import api_token_create
from chat.models import Message, Session
from chat.services.goals import goal_create
from chat.services.sessions import session_create
from engine.llm.embedded import MODEL_NAME
from tests.support.timing import scaled, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = "Answer in one short sentence."
ROUTES = [
    ("get", "/ollama/"),
    ("get", "/ollama/api/version"),
    ("get", "/ollama/api/tags"),
    ("get", "/ollama/api/ps"),
    ("post", "/ollama/api/show"),
    ("post", "/ollama/api/chat"),
    ("post", "/ollama/api/generate"),
    ("get", "/v1/models"),
    ("post", "/v1/chat/completions"),
]


@pytest.fixture
def ollama(api_token, api_gateway):
    """alice's client of the Ollama endpoint, as the ``ollama`` client sends it."""
    return Client(headers={"Authorization": f"Bearer {api_token}", "User-Agent": "ollama-python/0.6.3"})


def ollama_chat(client: Client, messages: list[dict[str, str]], **extra: Any) -> tuple[dict[str, Any], str]:
    """A non-streaming /ollama/api/chat; the answer and the session it went to."""
    body = {"model": MODEL_NAME, "messages": messages, "stream": False, **extra.pop("body", {})}
    response = client.post("/ollama/api/chat", json.dumps(body), content_type="application/json", **extra)
    assert response.status_code == 200, response.content
    return response.json(), response["X-OLLM-Session"]


def chat_while_the_model_fails(client: Client, model_server: Any, messages: list[dict[str, str]]) -> Any:
    """A non-streaming /ollama/api/chat answered while the model server fails every request."""
    body = json.dumps({"model": MODEL_NAME, "messages": messages, "stream": False})
    model_server.behaviour.fail_status = 500
    try:
        return client.post("/ollama/api/chat", body, content_type="application/json")
    finally:
        model_server.reset()


def roles_and_texts(session_id: str) -> list[tuple[str, str]]:
    return list(Message.objects.filter(session_id=session_id).order_by("position").values_list("role", "content"))


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_refuses_no_token_a_bad_token_and_a_logged_in_browser(method, path, user, api_gateway):
    browser = Client()
    browser.force_login(user)
    callers = [Client(), Client(headers={"Authorization": "Bearer not-a-token"}), browser]
    for caller in callers:
        post = method == "post"
        response = caller.post(path, "{}", content_type="application/json") if post else caller.get(path)
        assert response.status_code == 401
        error = response.json()["error"]
        if path.startswith("/v1/"):
            assert error["code"] == "invalid_api_key"
            assert "Bearer" in error["message"]
        else:
            assert "Bearer" in error
    assert not Session.objects.exists()


def test_a_resent_history_continues_its_session_and_the_model_gets_the_managed_prompt(ollama, model_server):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the capital of France?"}]
    first, session_id = ollama_chat(ollama, messages, body={"options": {"num_ctx": 2048}})
    assert first["done"] is True
    assert first["prompt_eval_count"] > 0
    assert first["eval_count"] > 0
    session = Session.objects.get(pk=session_id)
    assert (session.context_size, session.max_tokens) == (2048, 1700)
    assert session.client == "ollama-python/0.6.3"
    assert session.title == "What is the capital of France?"
    assert session.system_prompt == SYSTEM
    messages += [first["message"], {"role": "user", "content": "And of Italy?"}]
    model_server.behaviour.requests.clear()
    second, again = ollama_chat(ollama, messages, body={"options": {"num_ctx": 2048}})
    assert again == session_id
    assert Session.objects.count() == 1
    assert roles_and_texts(session_id) == [
        ("user", "What is the capital of France?"),
        ("assistant", first["message"]["content"]),
        ("user", "And of Italy?"),
        ("assistant", second["message"]["content"]),
    ]
    # What the model was sent is the session's window, with the pinned block in the system message.
    sent = next(r for r in model_server.behaviour.requests if r["path"] == "/api/chat")
    assert sent["options"]["num_ctx"] == 1700
    assert sent["messages"][0]["role"] == "system"
    assert sent["messages"][0]["content"].startswith(SYSTEM)
    assert [m["content"] for m in sent["messages"][1:]] == [m["content"] for m in messages[1:]]


def test_the_session_header_continues_a_session_with_only_the_new_message(ollama, user):
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="Started on the page")
    answer, session_id = ollama_chat(
        ollama, [{"role": "user", "content": "Say hello."}], HTTP_X_OLLM_SESSION=str(session.pk)
    )
    assert session_id == str(session.pk)
    assert roles_and_texts(session_id) == [("user", "Say hello."), ("assistant", answer["message"]["content"])]
    assert Session.objects.get(pk=session.pk).client == ""  # started on the page, not by a client


def test_the_session_header_continues_a_session_whose_listed_history_the_client_resends(ollama, user, api_token):
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="Started on the page")
    header = {"HTTP_X_OLLM_SESSION": str(session.pk)}
    ollama_chat(ollama, [{"role": "user", "content": "Name a fruit."}], **header)
    # A turn the client took no part in, as the page or a script takes it.
    api = Client(headers={"Authorization": f"Bearer {api_token}"})
    turn = api.post(
        f"/api/sessions/{session.pk}/messages", {"content": "Name a color."}, content_type="application/json"
    )
    assert turn.status_code == 200, turn.content
    listed = api.get(f"/api/sessions/{session.pk}/messages").json()["items"]
    history = [{"role": m["role"], "content": m["content"]} for m in listed]
    assert len(history) == 4
    messages = [*history, {"role": "user", "content": "Name a tree."}]
    response = ollama.post(
        "/v1/chat/completions",
        json.dumps({"model": MODEL_NAME, "messages": messages}),
        content_type="application/json",
        **header,
    )
    assert response.status_code == 200, response.content
    assert response["X-OLLM-Session"] == str(session.pk)
    assert Session.objects.count() == 1
    reply = response.json()["choices"][0]["message"]["content"]
    assert roles_and_texts(str(session.pk)) == [
        *((m["role"], m["content"]) for m in history),
        ("user", "Name a tree."),
        ("assistant", reply),
    ]
    # Its next request resends what it now holds: the same session again.
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "Name a bird."}]
    again = ollama.post(
        "/v1/chat/completions",
        json.dumps({"model": MODEL_NAME, "messages": messages}),
        content_type="application/json",
        **header,
    )
    assert again["X-OLLM-Session"] == str(session.pk)
    assert Session.objects.count() == 1
    assert len(roles_and_texts(str(session.pk))) == 8


def test_an_edited_history_branches_into_a_new_session_and_leaves_the_old_one_alone(ollama):
    messages = [{"role": "user", "content": "Name a fruit."}]
    first, session_id = ollama_chat(ollama, messages)
    before = roles_and_texts(session_id)
    edited = [
        {"role": "user", "content": "Name a vegetable."},
        first["message"],
        {"role": "user", "content": "Another?"},
    ]
    second, branch_id = ollama_chat(ollama, edited)
    assert branch_id != session_id
    # Not even the first message is shared: a new conversation, not a branch of the old one.
    assert Session.objects.get(pk=branch_id).parent_id is None
    assert roles_and_texts(session_id) == before
    assert roles_and_texts(branch_id) == [
        ("user", "Name a vegetable."),
        ("assistant", first["message"]["content"]),
        ("user", "Another?"),
        ("assistant", second["message"]["content"]),
    ]


def test_a_regenerate_in_the_named_session_branches_it_with_its_goal(ollama, user, model_server):
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="Started on the page")
    goal_create(session=session, description="Learn the capitals")
    header = {"HTTP_X_OLLM_SESSION": str(session.pk)}
    messages = [{"role": "user", "content": "Capital of France?"}]
    first, _ = ollama_chat(ollama, messages, **header)
    messages += [first["message"], {"role": "user", "content": "Capital of Italy?"}]
    _, again = ollama_chat(ollama, messages, **header)
    assert again == str(session.pk)
    model_server.behaviour.requests.clear()
    regenerated, branch_id = ollama_chat(ollama, messages, **header)  # the same request: its reply again
    branch = Session.objects.get(pk=branch_id)
    assert (branch.parent_id, branch.forked_at_position) == (session.pk, 2)
    assert roles_and_texts(branch_id) == [
        *roles_and_texts(str(session.pk))[:3],
        ("assistant", regenerated["message"]["content"]),
    ]
    assert len(roles_and_texts(str(session.pk))) == 4  # the session is as it was
    sent = next(r for r in model_server.behaviour.requests if r["path"] == "/api/chat")
    assert "ACTIVE GOAL: Learn the capitals" in sent["messages"][0]["content"]


def test_a_repeated_call_after_a_failure_answers_the_stored_message_instead_of_storing_it_again(ollama, model_server):
    messages = [{"role": "user", "content": "Name a fruit."}]
    first, session_id = ollama_chat(ollama, messages)
    messages += [first["message"], {"role": "user", "content": "Name a color."}]
    failed = chat_while_the_model_fails(ollama, model_server, messages)
    assert failed.status_code in (502, 503)
    assert isinstance(failed.json()["error"], str)
    assert roles_and_texts(session_id)[-1] == ("user", "Name a color.")  # stored before the model failed
    second, again = ollama_chat(ollama, messages)
    assert again == session_id
    assert roles_and_texts(session_id)[2:] == [("user", "Name a color."), ("assistant", second["message"]["content"])]


def test_another_users_session_in_the_header_is_not_found_and_not_touched(ollama, other_user):
    theirs = session_create(owner=other_user, model=MODEL_NAME, context_size=2048, title="Bob's")
    response = ollama.post(
        "/ollama/api/chat",
        json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "stream": False}),
        content_type="application/json",
        HTTP_X_OLLM_SESSION=str(theirs.pk),
    )
    assert response.status_code == 404
    assert response.json() == {"error": "No such session of yours."}
    assert not Message.objects.exists()
    assert Session.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ("not json", 400, "not JSON"),
        ({"messages": [{"role": "user", "content": "Hi"}]}, 400, "model"),
        ({"model": MODEL_NAME, "messages": [{"role": "system", "content": "Be brief."}]}, 400, "must be the user's"),
        ({"model": MODEL_NAME, "messages": [{"role": "assistant", "content": "Hi"}]}, 400, "must be the user's"),
        (
            {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "tool_choice": "required"},
            400,
            "tool_choice",
        ),
        ({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi", "images": ["AA=="]}]}, 400, "images"),
        (
            {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "options": {"num_ctx": "big"}},
            400,
            "num_ctx",
        ),
        ({"model": "no-such-model:1b", "messages": [{"role": "user", "content": "Hi"}]}, 404, "no-such-model"),
        ({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}]}, 400, "X-OLLM-Session"),
    ],
)
def test_bad_requests_get_ollamas_error_shape_and_store_nothing(ollama, body, status, says):
    extra = {"HTTP_X_OLLM_SESSION": "not-a-uuid"} if says == "X-OLLM-Session" else {}
    data = body if isinstance(body, str) else json.dumps(body)
    response = ollama.post("/ollama/api/chat", data, content_type="application/json", **extra)
    assert response.status_code == status
    assert says in response.json()["error"]
    assert not Message.objects.exists()


def test_a_body_over_the_rest_apis_limit_is_refused(ollama, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    big = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x" * 20_000}]}
    response = ollama.post("/ollama/api/chat", json.dumps(big), content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {"error": "The request body is too large."}


def test_openai_errors_have_openais_shape(api_token, api_gateway):
    client = Client(headers={"Authorization": f"Bearer {api_token}"})
    response = client.post(
        "/v1/chat/completions",
        json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "text" in response.json()["error"]["message"]


def test_the_model_routes_describe_what_the_backends_serve(ollama, api_token):
    tags = ollama.get("/ollama/api/tags").json()["models"]
    assert [m["name"] for m in tags] == [MODEL_NAME]
    assert tags[0]["details"]["parameter_size"] == "135M"
    shown = ollama.post("/ollama/api/show", json.dumps({"model": MODEL_NAME}), content_type="application/json")
    assert shown.json()["details"]["family"] == tags[0]["details"]["family"]
    missing = ollama.post("/ollama/api/show", json.dumps({"model": "nope"}), content_type="application/json")
    assert missing.status_code == 404
    assert ollama.get("/ollama/api/version").json()["version"]
    assert [m["name"] for m in ollama.get("/ollama/api/ps").json()["models"]] == [MODEL_NAME]
    assert ollama.get("/ollama/").content == b"Ollama is running"
    models = Client(headers={"Authorization": f"Bearer {api_token}"}).get("/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL_NAME]


def test_generate_answers_a_prompt_in_a_session_of_its_own(ollama):
    body = {"model": MODEL_NAME, "prompt": "Name a planet.", "system": SYSTEM, "stream": False}
    response = ollama.post("/ollama/api/generate", json.dumps(body), content_type="application/json")
    assert response.status_code == 200
    answer = response.json()
    assert answer["done"] is True
    assert answer["response"].strip()
    session = Session.objects.get(pk=response["X-OLLM-Session"])
    assert session.system_prompt == SYSTEM
    assert roles_and_texts(str(session.pk)) == [("user", "Name a planet."), ("assistant", answer["response"])]


def test_a_token_sees_only_its_owners_sessions(ollama, other_user, api_gateway):
    messages = [{"role": "user", "content": "Name a fruit."}]
    first, session_id = ollama_chat(ollama, messages)
    bob = Client(headers={"Authorization": f"Bearer {api_token_create(user=other_user, name='bob')[1]}"})
    # bob resends alice's history: it is not continued (a session of bob's own is started).
    _, bobs = ollama_chat(bob, [*messages, first["message"], {"role": "user", "content": "Another?"}])
    assert bobs != session_id
    assert Session.objects.get(pk=bobs).owner == other_user
    assert len(roles_and_texts(session_id)) == 2


def test_a_first_message_repeated_after_a_failure_is_answered_in_its_session_not_stored_again(ollama, model_server):
    messages = [{"role": "user", "content": "Name a river."}]
    failed = chat_while_the_model_fails(ollama, model_server, messages)
    assert failed.status_code in (502, 503)
    session_id = failed["X-OLLM-Session"] if failed.has_header("X-OLLM-Session") else None
    answer, again = ollama_chat(ollama, messages)
    assert Session.objects.count() == 1
    assert session_id in (None, again)
    assert roles_and_texts(again) == [("user", "Name a river."), ("assistant", answer["message"]["content"])]


def test_two_requests_with_the_same_history_at_once_answer_in_two_sessions(
    ollama, model_server, api_token, api_gateway
):
    first, session_id = ollama_chat(ollama, [{"role": "user", "content": "Name a fruit."}])
    history = [{"role": "user", "content": "Name a fruit."}, first["message"]]
    answers: dict[str, tuple[dict[str, Any], str]] = {}

    def ask(question: str) -> None:
        client = Client(headers={"Authorization": f"Bearer {api_token}"})
        answers[question] = ollama_chat(client, [*history, {"role": "user", "content": question}])
        connections.close_all()

    hold = model_server.hold()
    try:
        asking = [threading.Thread(target=ask, args=(question,)) for question in ("Another?", "A vegetable?")]
        asking[0].start()
        wait_until(lambda: model_server.behaviour.waiting == 1, timeout=60, what="the first request at the model")
        asking[1].start()
        # The bundled model's host runs one generation at a time: the second waits in its queue.
        queue = api_gateway.embedded_host.queue
        wait_until(lambda: queue.state().queued_turns == 1, timeout=60, what="the second request in the host's queue")
    finally:
        hold.set()
    for thread in asking:
        thread.join(scaled(120))
    (one, one_id), (two, two_id) = answers["Another?"], answers["A vegetable?"]
    assert one_id == session_id  # the first took the session
    assert two_id != session_id  # the second, with the same history, branched
    kept = [("user", "Name a fruit."), ("assistant", first["message"]["content"])]
    assert roles_and_texts(one_id) == [*kept, ("user", "Another?"), ("assistant", one["message"]["content"])]
    assert roles_and_texts(two_id) == [*kept, ("user", "A vegetable?"), ("assistant", two["message"]["content"])]


def test_a_request_with_nothing_to_answer_loads_the_model_and_starts_no_session(ollama):
    loaded = ollama.post(
        "/ollama/api/chat", json.dumps({"model": MODEL_NAME, "messages": []}), content_type="application/json"
    )
    assert loaded.status_code == 200
    assert loaded.json()["done_reason"] == "load"
    generated = ollama.post("/ollama/api/generate", json.dumps({"model": MODEL_NAME}), content_type="application/json")
    assert generated.json()["response"] == ""
    assert not Session.objects.exists()


def test_an_unexpected_failure_is_a_500_in_the_apis_shape(ollama, api_token, monkeypatch):
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr("chat.dropin.common.conversation_resolve", broken)
    body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}]})
    ollama_answer = ollama.post("/ollama/api/chat", body, content_type="application/json")
    assert ollama_answer.status_code == 500
    assert ollama_answer.json()["error"].startswith("Internal error")
    openai = Client(headers={"Authorization": f"Bearer {api_token}"})
    openai_answer = openai.post("/v1/chat/completions", body, content_type="application/json")
    assert openai_answer.status_code == 500
    assert openai_answer.json()["error"]["type"] == "server_error"
