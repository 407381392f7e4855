"""An outside client's Regenerate and Edit (as Open WebUI sends them, through the real ``openai`` client over
HTTP) branch the session: one branch each, linked to it, keeping the goal and the locked decision."""

from __future__ import annotations

from typing import Any

import openai

from engine.llm.embedded import MODEL_NAME
from tests.support.drop_in import DECISION, GOAL, DropIn
from tests.support.model_server import ModelServerProcess
from tests.support.timing import scaled

SYSTEM = "Answer in one short sentence."


def ask(chat: openai.OpenAI, messages: list[dict[str, str]]) -> str:
    reply = chat.chat.completions.create(model=MODEL_NAME, messages=messages)  # type: ignore[arg-type]
    return reply.choices[0].message.content or ""


def sent_prompts(model_server: ModelServerProcess) -> list[dict[str, Any]]:
    return [r for r in model_server.behaviour.requests if r["path"] == "/api/chat"]


def stored(drop_in: DropIn, session_id: str) -> list[tuple[str, str]]:
    return [(m["role"], m["content"].strip()) for m in drop_in.history(session_id)]


def test_regenerate_and_edit_each_branch_once_keeping_the_goal_and_decision(
    drop_in: DropIn, model_server: ModelServerProcess
) -> None:
    chat = openai.OpenAI(base_url=f"{drop_in.url}/v1", api_key=drop_in.token, timeout=scaled(600), max_retries=0)
    known = {s["id"] for s in drop_in.sessions()}
    messages = [{"role": "system", "content": SYSTEM}]
    for question in ("Name a colour.", "Name a fruit.", "Name a tree."):
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": ask(chat, messages)})
    [parent] = [s for s in drop_in.sessions() if s["id"] not in known]
    assert parent["parent_id"] is None
    drop_in.pin(parent["id"])
    before = stored(drop_in, parent["id"])
    assert len(before) == 6

    def new_branches() -> list[dict[str, Any]]:
        return [s for s in drop_in.sessions() if s["id"] not in known and s["id"] != parent["id"]]

    # Edit: the second question changed, and sent with what came before it.
    model_server.behaviour.requests.clear()
    edited = [*messages[:3], {"role": "user", "content": "Name a vegetable."}]
    edited_reply = ask(chat, edited)
    [edit_branch] = new_branches()
    assert (edit_branch["parent_id"], edit_branch["forked_at_position"]) == (parent["id"], 2)
    assert stored(drop_in, edit_branch["id"]) == [
        *before[:2],
        ("user", "Name a vegetable."),
        ("assistant", edited_reply.strip()),
    ]
    [prompt] = sent_prompts(model_server)
    assert f"ACTIVE GOAL: {GOAL}" in prompt["messages"][0]["content"]
    assert f"🔒 {DECISION}" in prompt["messages"][0]["content"]

    # Regenerate: the last question sent again, without its reply.
    model_server.behaviour.requests.clear()
    regenerated = ask(chat, messages[:-1])
    branches = new_branches()
    assert len(branches) == 2
    [regen_branch] = [b for b in branches if b["id"] != edit_branch["id"]]
    assert (regen_branch["parent_id"], regen_branch["forked_at_position"]) == (parent["id"], 4)
    assert stored(drop_in, regen_branch["id"]) == [*before[:5], ("assistant", regenerated.strip())]
    [prompt] = sent_prompts(model_server)
    assert f"ACTIVE GOAL: {GOAL}" in prompt["messages"][0]["content"]
    assert f"🔒 {DECISION}" in prompt["messages"][0]["content"]

    # The parent is as it was; the regenerated conversation goes on in its branch, no further one.
    assert stored(drop_in, parent["id"]) == before
    ask(chat, [*messages[:-1], {"role": "assistant", "content": regenerated}, {"role": "user", "content": "Why?"}])
    assert len(new_branches()) == 2
    assert stored(drop_in, regen_branch["id"])[-2][1] == "Why?"
    # Shown as branches: the line on the branch's page and the list on the parent's.
    page = drop_in.dashboard(f"/sessions/{regen_branch['id']}/")
    assert "Branch of <a" in page
    assert "at message 4" in page
    assert "2 branches of this session" in drop_in.dashboard(f"/sessions/{parent['id']}/")
