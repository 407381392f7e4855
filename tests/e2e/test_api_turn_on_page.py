"""A turn through the REST API shows on the session's open page (in Chromium against a real server):
its two messages are appended under what the page shows, once each, and only the newest reply keeps
Regenerate."""

from __future__ import annotations

import json

from tests.factories import REPLY_TIMEOUT_MS, log_in, new_session, send, wait_idle

DESKTOP = {"width": 1280, "height": 900}


def api_send(page, live_url: str, content: str) -> None:
    """A message to the page's session through the REST API, as its user (the page's cookie and CSRF token)."""
    session_id = page.locator("#chat-page").get_attribute("data-session")
    csrf = json.loads(page.locator("body").get_attribute("hx-headers") or "{}")["X-CSRFToken"]
    answer = page.request.post(
        f"{live_url}/api/sessions/{session_id}/messages",
        data=json.dumps({"content": content}),
        headers={"Content-Type": "application/json", "X-CSRFToken": csrf},
    )
    assert answer.ok, answer.text()


def test_an_api_turn_is_appended_to_the_open_page(live_url, browser, scripted):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    log_in(page, live_url)
    new_session(page, "API beside the page")
    scripted.behaviour.canned_replies = ["Twelve piles.", "Granite <b>blocks</b>."]
    send(page, "How many piles hold the pier?")
    wait_idle(page)
    page.wait_for_selector("#history .msg-assistant:has-text('Twelve piles.')")

    api_send(page, live_url, "What are they made of?")

    page.wait_for_selector("#history .msg-assistant:has-text('Granite <b>blocks</b>.')", timeout=REPLY_TIMEOUT_MS)
    roles = page.locator("#history article.msg").evaluate_all("(all) => all.map((a) => a.className.split(' ')[1])")
    assert roles == ["msg-user", "msg-assistant", "msg-user", "msg-assistant"]
    assert page.locator("#history .msg-user:has-text('What are they made of?')").count() == 1
    regenerate = page.locator("#history [data-action=regenerate]")
    assert regenerate.count() == 1, "only the newest reply can be regenerated"
    assert page.locator("#history .msg-assistant").last.locator("[data-action=regenerate]").count() == 1
    assert page.locator("#history b").count() == 0, "the model's markup is shown as text"
    context.close()


def test_an_append_the_page_already_shows_is_not_shown_twice(live_url, browser, scripted):
    """The whole history can reach the page before the append of a REST turn (a compression's event
    frame re-sends it, or the page was rendered after the turn was stored): the append, arriving then,
    adds nothing. Replayed here through htmx's own out-of-band swap, as the socket's frame is."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    frames: list[str] = []
    page.on("websocket", lambda socket: socket.on("framereceived", lambda payload: frames.append(str(payload))))
    log_in(page, live_url)
    new_session(page, "An append arrives late")
    scripted.behaviour.canned_replies = ["Twelve piles.", "Granite blocks."]
    send(page, "How many piles hold the pier?")
    wait_idle(page)
    api_send(page, live_url, "What are they made of?")
    page.wait_for_selector("#history .msg-assistant:has-text('Granite blocks.')", timeout=REPLY_TIMEOUT_MS)
    appends = [frame for frame in frames if "data-append" in frame and "What are they made of?" in frame]
    assert len(appends) == 1, "the REST turn came to the page as one append"

    swaps = int(page.locator("body").get_attribute("data-swaps") or 0)
    page.evaluate("(frame) => htmx.swap('#history', frame, {swapStyle: 'none'})", appends[0])
    page.wait_for_function("(before) => Number(document.body.dataset.swaps) > before", arg=swaps)
    ids = page.locator("#history article.msg").evaluate_all("(all) => all.map((a) => a.id)")
    assert len(ids) == 4, ids
    assert len(set(ids)) == 4, ids
    page.reload()
    page.wait_for_selector("body[data-socket=open]")
    page.evaluate("(frame) => htmx.swap('#history', frame, {swapStyle: 'none'})", appends[0])
    assert page.locator("#history article.msg").count() == 4, "a page rendered after the turn does not add it again"
    context.close()
