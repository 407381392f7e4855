"""Issue 47, item 4: a chat turn that waits for the model (another client's turn holds its host's one
slot) says its place in the queue and the time it has waited, live, in a status frame on the socket;
then "thinking…" once it runs, and the reply streams as usual."""

from __future__ import annotations

import json
import re

import pytest

from chat.services.sessions import session_create
from chat.services.turn.room import queued_text
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from tests.factories import frames_until, socket
from tests.support.model_server import SERVED_MODEL

pytestmark = pytest.mark.django_db(transaction=True)
STATUS = re.compile(r'<span id="reply-1-status" class="muted" hx-swap-oob="true">(.*?)</span>', re.S)


@pytest.fixture
def one_slot(user, use_gateway, fake_ollama):
    """A gateway whose one Ollama host runs one generation at a time, and a session on it."""
    gateway = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=60), slots=1)
    use_gateway(gateway)
    fake_ollama.behaviour.canned_reply = "The pier is ready."
    return gateway, session_create(owner=user, model=SERVED_MODEL, context_size=4096)


def test_the_queue_text_says_place_and_seconds():
    assert queued_text(1, 0.4) == "queued for the model: 1 request ahead · waiting 0 s"
    assert queued_text(3, 12.9) == "queued for the model: 3 requests ahead · waiting 12 s"


async def test_a_waiting_turn_sends_its_place_and_time_as_status_frames(one_slot, user):
    gateway, session = one_slot
    page = await socket(session.pk, user)
    assert (await page.connect())[0]
    async with gateway.ollama_hosts[0].queue.slot(background=False):  # another client's turn holds the model
        await page.send_to(text_data=json.dumps({"message": "Is the pier ready?"}))
        frames = await frames_until(page, "waiting 1 s")
        statuses = [s for frame in frames for s in STATUS.findall(frame)]
        assert statuses[0] == "queued for the model: 1 request ahead · waiting 0 s"
        assert statuses[-1] == "queued for the model: 1 request ahead · waiting 1 s"
    frames = await frames_until(page, 'id="context-meter"')
    assert "thinking…" in [s for frame in frames for s in STATUS.findall(frame)]
    assert "The pier is ready." in "".join(frames)
    await page.disconnect()
