"""A turn through the REST API shows on the session's open page (in Chromium against a real server):
its two messages are appended under what the page shows, once each, and only the newest reply keeps
Regenerate."""

from __future__ import annotations

import json

from tests.factories import REPLY_TIMEOUT_MS, log_in, new_session, send, wait_idle

DESKTOP = {"width": 1280, "height": 900}


def test_an_api_turn_is_appended_to_the_open_page(live_url, browser, scripted):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    log_in(page, live_url)
    new_session(page, "API beside the page")
    scripted.behaviour.canned_replies = ["Twelve piles.", "Granite <b>blocks</b>."]
    send(page, "How many piles hold the pier?")
    wait_idle(page)
    page.wait_for_selector("#history .msg-assistant:has-text('Twelve piles.')")

    session_id = page.locator("#chat-page").get_attribute("data-session")
    csrf = json.loads(page.locator("body").get_attribute("hx-headers") or "{}")["X-CSRFToken"]
    answer = page.request.post(
        f"{live_url}/api/sessions/{session_id}/messages",
        data=json.dumps({"content": "What are they made of?"}),
        headers={"Content-Type": "application/json", "X-CSRFToken": csrf},
    )
    assert answer.ok, answer.text()

    page.wait_for_selector("#history .msg-assistant:has-text('Granite <b>blocks</b>.')", timeout=REPLY_TIMEOUT_MS)
    roles = page.locator("#history article.msg").evaluate_all("(all) => all.map((a) => a.className.split(' ')[1])")
    assert roles == ["msg-user", "msg-assistant", "msg-user", "msg-assistant"]
    assert page.locator("#history .msg-user:has-text('What are they made of?')").count() == 1
    regenerate = page.locator("#history [data-action=regenerate]")
    assert regenerate.count() == 1, "only the newest reply can be regenerated"
    assert page.locator("#history .msg-assistant").last.locator("[data-action=regenerate]").count() == 1
    assert page.locator("#history b").count() == 0, "the model's markup is shown as text"
    context.close()
