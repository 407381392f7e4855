"""Issue 47, item 4: a chat turn that waits for the model shows its place in the queue and the time it
has waited, updated live, while another client's turn holds the model (a server whose bundled model
runs one turn at a time: OLLM_MODEL_SLOTS=1). The model server holds generations until the test
releases them, so the wait lasts as long as the test needs, never a guess of time."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.factories import REPLY_TIMEOUT_MS, log_in, new_session, send, wait_idle
from tests.support.live_server import serve

STATUS = "#history .streaming [id$='-status']"


@pytest.fixture(scope="module")
def one_slot_url(tmp_path_factory, model_server) -> Iterator[str]:
    with serve(tmp_path_factory.mktemp("queue"), model_server, with_user=True, env={"OLLM_MODEL_SLOTS": "1"}) as url:
        yield url


def waited_seconds(page) -> int:
    match = re.search(r"1 request ahead · waiting (\d+) s", page.locator(STATUS).inner_text())
    assert match, page.locator(STATUS).inner_text()
    return int(match.group(1))


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
def test_a_waiting_turn_shows_its_place_in_the_queue_and_the_time_waited(one_slot_url, browser, scripted, viewport):
    context = browser.new_context(viewport=viewport)
    holder, waiter = context.new_page(), context.new_page()
    log_in(holder, one_slot_url)
    new_session(holder, "Holds the model")
    waiter.goto(one_slot_url + "/")
    new_session(waiter, "Waits its turn")
    hold = scripted.hold()
    scripted.behaviour.canned_reply = "The pier is ready."
    try:
        send(holder, "Describe the pier.")  # another client's turn takes the model's one slot, and is held
        holder.wait_for_selector(STATUS, state="attached")
        send(waiter, "Is the pier ready?")
        waiter.wait_for_selector(f"{STATUS}:has-text('1 request ahead')", timeout=REPLY_TIMEOUT_MS)
        assert waiter.locator(STATUS).is_visible(), "the place in the queue is in view"
        first = waited_seconds(waiter)
        # Live: the seconds go up while it waits, with no reload.
        waiter.wait_for_function(
            "([sel, first]) => { const m = /waiting (\\d+) s/.exec(document.querySelector(sel).textContent);"
            " return !!m && Number(m[1]) > first; }",
            arg=[STATUS, first],
            timeout=REPLY_TIMEOUT_MS,
        )
        assert waited_seconds(waiter) > first
    finally:
        hold.set()
    wait_idle(holder)
    wait_idle(waiter)
    waiter.wait_for_selector(".msg-assistant:has-text('The pier is ready.')")
    assert waiter.locator(STATUS).count() == 0, "the queue line goes once the reply comes"
    context.close()
