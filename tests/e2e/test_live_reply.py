"""A reply belongs to the session, not to the page (issue 35): in Chromium against a real server, a
reload during a reply joins it and the rest streams in, a second tab of the session streams the
same reply, and Stop in either tab stops it.

The test model server streams a fixed text slowly, so a reply is still coming whatever the test
does after its first words arrive; the tests wait on what the page shows, never on time."""

from __future__ import annotations

from typing import Any

from tests.factories import REPLY_TIMEOUT_MS, log_in, new_session, send, wait_idle

DESKTOP = {"width": 1280, "height": 900}
# Cut at the e2e server's reply cap (40 tokens): a dozen seconds at this pace.
REPLY = "The north pier rests on twelve piles driven deep into the rock below the harbour. " * 6
CHUNK_DELAY_SECONDS = 0.3


def slow_replies(scripted) -> None:
    scripted.behaviour.canned_reply = REPLY
    scripted.behaviour.chunk_delay_seconds = CHUNK_DELAY_SECONDS


def open_tab(context, url: str):
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-socket=open]", state="attached")
    return page


def first_words_arrived(page) -> None:
    """Until the reply streaming into the page has its first words."""
    page.wait_for_selector("#history .streaming .body:not(:empty)", timeout=REPLY_TIMEOUT_MS)


def streamed_length(page) -> int:
    return int(page.evaluate("() => document.querySelector('#history .streaming .body').textContent.length"))


def stored_messages(page, live_url: str) -> list[dict[str, Any]]:
    """The session's whole history as the API reads it from the database (the page's login)."""
    session_id = page.locator("#chat-page").get_attribute("data-session")
    response = page.request.get(f"{live_url}/api/sessions/{session_id}/messages?include_compressed=true")
    assert response.ok, response.text()
    return list(response.json()["items"])  # one page: the first 100 messages


def shown_reply(page) -> str:
    return str(page.locator("#history .msg-assistant template.raw").evaluate("(t) => t.content.textContent"))


def two_tabs_streaming(live_url, browser, scripted, title: str):
    """A new session open in two tabs, with a slow reply, asked for in the first, streaming into both."""
    context = browser.new_context(viewport=DESKTOP)
    first = context.new_page()
    log_in(first, live_url)
    new_session(first, title)
    second = open_tab(context, first.url)
    slow_replies(scripted)
    send(first, "Describe the north pier.")
    first_words_arrived(second)
    return context, first, second


def test_a_reload_during_the_reply_resumes_the_stream_and_stores_one_reply(live_url, browser, scripted):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    log_in(page, live_url)
    new_session(page, "Reload mid-reply")
    slow_replies(scripted)
    send(page, "Describe the north pier.")
    first_words_arrived(page)

    page.reload()
    page.wait_for_selector("body[data-socket=open]", state="attached")
    # The page shows the reply in progress: its question offers no Retry, Send waits, Stop is on.
    first_words_arrived(page)
    assert page.locator("[data-action=retry]").count() == 0
    assert page.locator("#send-button").is_disabled()
    assert page.locator("#stop-button").is_enabled()
    # The rest streams in, then the stored reply takes its place.
    page.wait_for_function(
        "(n) => { const b = document.querySelector('#history .streaming .body');"
        " return !!b && b.textContent.length > n; }",
        arg=streamed_length(page),
        timeout=REPLY_TIMEOUT_MS,
    )
    wait_idle(page)
    page.wait_for_selector("#history .streaming", state="detached")

    stored = stored_messages(page, live_url)
    assert [m["role"] for m in stored] == ["user", "assistant"], "exactly one reply after the question"
    assert REPLY.startswith(stored[1]["content"])
    assert stored[1]["done_reason"] != "cancelled"
    assert page.locator("#history .msg-assistant").count() == 1
    assert shown_reply(page) == stored[1]["content"]
    assert page.locator("[data-action=retry]").count() == 0
    context.close()


def test_two_tabs_of_a_session_stream_the_same_reply(live_url, browser, scripted):
    context, first, second = two_tabs_streaming(live_url, browser, scripted, "Two tabs")
    assert second.locator(".msg-user:has-text('Describe the north pier.')").count() == 1
    assert second.locator("#stop-button").is_enabled(), "any tab of the session may stop the reply"
    for page in (first, second):
        wait_idle(page)
        page.wait_for_selector("#history .streaming", state="detached")
    stored = stored_messages(first, live_url)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert shown_reply(first) == shown_reply(second) == stored[1]["content"]
    context.close()


def test_stop_in_one_tab_stops_the_reply_started_in_another(live_url, browser, scripted):
    context, first, second = two_tabs_streaming(live_url, browser, scripted, "Stop elsewhere")
    second.click("#stop-button")
    for page in (first, second):
        wait_idle(page)
        page.wait_for_selector("#chat-status:has-text('Stopped.')")
        page.wait_for_selector("#history .msg-assistant .badge:has-text('stopped')")
    stored = stored_messages(first, live_url)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert REPLY.startswith(stored[1]["content"])
    assert stored[1]["done_reason"] == "cancelled"
    # Either tab may send again.
    assert first.locator("#send-button").is_enabled()
    assert second.locator("#send-button").is_enabled()
    context.close()
