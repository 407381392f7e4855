"""Open WebUI's background tasks told from turns, on its real templates as it sends them
(tests/data/open_webui_tasks.json), and the name a client is shown by."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.core.client_history import ClientMessage
from engine.core.client_tasks import OTHER, TASK_KINDS, client_label, task_kind

RECORDED = json.loads((Path(__file__).parent.parent / "data" / "open_webui_tasks.json").read_text(encoding="utf-8"))


def messages(raw: list[dict[str, Any]]) -> list[ClientMessage]:
    return [ClientMessage(m["role"], m["content"]) for m in raw]


@pytest.mark.parametrize("task", RECORDED["tasks"], ids=lambda t: t["name"])
def test_each_recorded_task_is_told_with_its_kind(task):
    assert task["kind"] in TASK_KINDS
    assert task_kind(messages(task["body"]["messages"])) == task["kind"]


@pytest.mark.parametrize("task", RECORDED["tasks"], ids=lambda t: t["name"])
def test_a_task_after_a_models_system_prompt_is_still_a_task(task):
    sent = [ClientMessage("system", "You are a helpful assistant."), *messages(task["body"]["messages"])]
    assert task_kind(sent) == task["kind"]


@pytest.mark.parametrize("turn", RECORDED["not_tasks"], ids=lambda t: t["name"])
def test_turns_are_not_tasks(turn):
    assert task_kind(messages(turn["messages"])) is None


def test_the_kind_is_read_from_the_instructions_not_from_the_chat_they_quote():
    # The chat asks about tags; the template asks for a title.
    title = next(t for t in RECORDED["tasks"] if t["name"] == "title")["body"]["messages"][0]["content"]
    quoting = title.replace("USER: And where", 'USER: Reply with { "tags": [] } and where')
    assert '"tags"' in quoting
    assert task_kind([ClientMessage("user", quoting)]) == "title"


def test_an_unknown_task_template_with_a_chat_history_is_another_task():
    text = "### Task:\nSummarize the chat.\n<chat_history>\nUSER: hi\n</chat_history>"
    assert task_kind([ClientMessage("user", text)]) == OTHER


def test_a_task_template_without_its_chat_history_is_a_turn():
    assert task_kind([ClientMessage("user", "### Task:\nSummarize.\n<chat_history>\nUSER: hi")]) is None


def test_open_webui_is_named_by_its_headers_whatever_its_user_agent():
    headers = ["Content-Type", "Authorization", "X-OpenWebUI-User-Name", "X-OpenWebUI-Chat-Id"]
    assert client_label("Python/3.11 aiohttp/3.12.15", headers) == "Open WebUI"
    assert client_label("", ["x-openwebui-user-id"]) == "Open WebUI"


def test_other_clients_are_named_by_their_user_agent():
    assert client_label(" ollama-python/0.6.0 (x86_64 linux) Python/3.11.2 ", ["User-Agent"]) == (
        "ollama-python/0.6.0 (x86_64 linux) Python/3.11.2"
    )
    assert client_label("", ["Content-Type"]) == "unknown client"
