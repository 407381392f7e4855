"""A client's background task (a title, tags, follow-ups) answered on the bundled model server: it goes in
the host's background queue, behind everyone's chat turns, and its answer is capped by the site's
OLLM_CLIENT_TASK_MAX_TOKENS even when the request sets no cap (a small model that loops on a task
would otherwise hold the model for the chats behind it)."""

from __future__ import annotations

import asyncio

import pytest

from chat.models import ClientTask
from chat.services.client_tasks import ClientTaskRequest, client_task_answer
from engine.core.client_history import ClientMessage
from engine.llm import Sampling
from engine.llm.embedded import MODEL_NAME

pytestmark = pytest.mark.django_db(transaction=True)

TITLE_TASK = (
    ClientMessage(
        "user",
        "### Task:\nGenerate a concise, 3-5 word title summarizing the chat history.\n"
        "<chat_history>\nUSER: How many piles does the north pier have?\nASSISTANT: Twelve.\n</chat_history>",
    ),
)
# Far longer than any cap below: the model server answers with it, cut at the request's num_predict.
LOOPING = "The north pier rests on twelve piles driven deep into the rock below the harbour. " * 30


def title_task(owner, *, max_tokens: int | None) -> ClientTaskRequest:
    return ClientTaskRequest(
        owner=owner,
        token=None,
        client="Open WebUI",
        kind="title",
        model=MODEL_NAME,
        messages=TITLE_TASK,
        num_ctx=None,
        sampling=Sampling(),
        max_tokens=max_tokens,
    )


@pytest.mark.parametrize(("site_cap", "request_cap", "expected"), [(12, None, 12), (12, 5, 5), (3, 40, 3)])
async def test_a_tasks_answer_is_capped_by_the_site_and_by_the_request(
    app_model_server, fake_ollama, user, settings, site_cap, request_cap, expected
):
    settings.OLLM_CLIENT_TASK_MAX_TOKENS = site_cap
    fake_ollama.behaviour.canned_reply = LOOPING

    outcome = await client_task_answer(request=title_task(user, max_tokens=request_cap))

    assert outcome.result.completion_tokens == expected
    assert outcome.result.done_reason == "length"
    assert LOOPING.startswith(outcome.new_text)
    assert [r["options"]["num_predict"] for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat"] == [
        expected
    ]
    recorded = await ClientTask.objects.aget(pk=outcome.task.pk)
    assert (recorded.completion_tokens, recorded.response, recorded.error) == (expected, outcome.new_text, "")


async def test_a_task_is_generated_in_the_background_queue_behind_chat_turns(app_model_server, fake_ollama, user):
    """The model itself answers here (a canned answer is not a generation the server records)."""
    # A generation another test left running would finish into this test's record.
    await asyncio.to_thread(fake_ollama.wait_idle)
    await asyncio.to_thread(fake_ollama.behaviour.requests.clear)
    outcome = await client_task_answer(request=title_task(user, max_tokens=4))

    served = fake_ollama.behaviour.served
    assert [(s.priority, s.completion_tokens) for s in served] == [("background", outcome.result.completion_tokens)]
    assert 0 < outcome.result.completion_tokens <= 4
