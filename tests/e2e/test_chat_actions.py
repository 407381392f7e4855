"""The chat as someone who uses Open WebUI or LibreChat daily expects it, in Chromium against a real
server and the test model server: a phone layout without horizontal scroll, Send and Stop that
follow the turn, Esc to stop, Retry after Stop (also after a reload), regenerate, edit (each a new version)
and copy.

The test model server holds a generation (Stop before the first token) and answers with given
texts (a regenerated reply that differs from the first), so nothing here waits on luck."""

from __future__ import annotations

import pytest

from tests.factories import SCREENSHOTS, log_in, new_session, send, wait_idle

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}


def start_session(page, live_url: str, title: str, context_size: str = "4096") -> None:
    log_in(page, live_url)
    new_session(page, title, context_size)


def no_horizontal_scroll(page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone-390x844", "desktop-1400x900"])
def test_the_chat_fits_the_screen_and_keeps_the_composer_at_the_bottom(live_url, browser, scripted, viewport):
    scripted.behaviour.canned_reply = "A short answer. " * 30
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    log_in(page, live_url)
    page.wait_for_selector("form[action$='/sessions/new/']")
    assert no_horizontal_scroll(page), "the sessions list"
    new_session(page, f"Layout {viewport['width']}")
    for turn in range(3):
        send(page, f"Question {turn}: a long line without spaces " + "x" * 120)
        wait_idle(page)
    assert no_horizontal_scroll(page), "the chat page"
    composer = page.locator("#composer").bounding_box()
    assert composer["y"] + composer["height"] <= viewport["height"] + 1, "the composer is on the screen"
    meter = page.locator("#meter-sticky").bounding_box()
    assert meter["y"] <= 1, "the meter stays at the top while the history scrolls"
    usage = page.locator("#context-meter .context-usage").inner_text()
    assert " tokens · " in usage
    assert "/ " in usage
    assert "nothing compressed yet" in page.locator("#context-meter").inner_text()
    if viewport == PHONE:
        assert meter["height"] < 140, "a compact meter on a phone"
        assert not page.locator("#side-panels").is_visible(), "the side panels are one tap away"
        page.click("#meter-sticky [data-action=toggle-side]")
        assert page.locator("#side-panels h2:has-text('Goals')").is_visible()
        page.screenshot(path=str(SCREENSHOTS / "phone-panels.png"))
        page.click("#side-panels [data-action=toggle-side]")
        assert not page.locator("#side-panels").is_visible()
        page.screenshot(path=str(SCREENSHOTS / "phone-chat.png"))
    else:
        assert page.locator("#side-panels").is_visible()
    context.close()


def test_stop_retry_regenerate_edit_and_copy(live_url, browser, scripted):
    context = browser.new_context(viewport=DESKTOP)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_url)
    page = context.new_page()
    start_session(page, live_url, "Actions")
    send_button, stop_button = page.locator("#send-button"), page.locator("#stop-button")
    assert send_button.is_enabled()
    assert stop_button.is_disabled()

    # Stop (Esc) before the first token: the question stays unanswered, with Retry, also after a reload.
    hold = scripted.hold()
    send(page, "What is the tide range?")
    assert send_button.is_disabled(), "Send is off while a reply comes"
    assert stop_button.is_enabled(), "Stop is on while a reply comes"
    page.wait_for_selector(".msg-user:has-text('What is the tide range?')")
    page.keyboard.press("Escape")
    wait_idle(page)
    assert "Stopped." in page.locator("#chat-status").inner_text()
    assert send_button.is_enabled()
    assert stop_button.is_disabled()
    page.wait_for_selector(".msg-user [data-action=retry]")
    page.reload()
    page.wait_for_selector("body[data-socket=open]", state="attached")
    retry = page.locator(".msg-user:has-text('What is the tide range?') [data-action=retry]")
    assert retry.count() == 1, "Retry survives a reload"
    # A fixed text, not a sequence: the stopped generation, released too, must not take a turn's text.
    scripted.behaviour.canned_reply = "The tide range is 3.2 m."
    hold.set()
    retry.click()
    wait_idle(page)
    page.wait_for_selector(".msg-assistant:has-text('The tide range is 3.2 m.')")
    assert page.locator("[data-action=retry]").count() == 0

    # Regenerate: a new reply; the old one is its version 1/2, out of the context, in the full history.
    first = page.locator(".msg-assistant:has-text('The tide range is 3.2 m.')")
    scripted.behaviour.canned_reply = "Tides rise and fall by 3.2 m."
    first.locator("[data-action=regenerate]").click()
    wait_idle(page)
    page.wait_for_selector(".msg-assistant:has-text('Tides rise and fall by 3.2 m.') [data-action=regenerate]")
    assert first.count() == 0, "the first reply is behind the switcher"
    assert page.locator(".msg-assistant .version-number").inner_text() == "2/2"

    # Copy gives the message's own text.
    page.locator(".msg-assistant:has-text('Tides rise') [data-action=copy]").click()
    assert page.evaluate("navigator.clipboard.readText()") == "Tides rise and fall by 3.2 m."

    # Edit and resend: the earlier version and its replies stay in the history, out of the context.
    scripted.behaviour.canned_reply = "Noted: 4 m."
    page.locator(".msg-user:has-text('What is the tide range?') [data-action=edit]").click()
    assert page.locator("#editing").is_visible()
    assert page.locator("#composer-text").input_value() == "What is the tide range?"
    page.fill("#composer-text", "What is the tide range at the north pier?")
    page.keyboard.press("Enter")
    wait_idle(page)
    page.wait_for_selector(".msg-assistant:has-text('Noted: 4 m.')")
    edited = page.locator(".msg-user:has-text('What is the tide range at the north pier?')")
    assert "history only" not in edited.inner_text()
    assert edited.locator(".version-number").inner_text() == "2/2"
    original = page.locator(".msg-user", has_text="What is the tide range?").filter(has_not_text="north pier")
    assert original.count() == 0, "the first version and its replies are behind the switcher"
    assert page.locator("#editing").is_hidden()
    page.screenshot(path=str(SCREENSHOTS / "chat-actions.png"))

    history = context.new_page()
    history.goto(page.url + "history/")
    text = history.locator("main").inner_text()
    for kept in ("What is the tide range?", "The tide range is 3.2 m.", "Tides rise and fall", "north pier", "Noted"):
        assert kept in text, f"the full history keeps {kept!r}"
    context.close()


def test_a_refused_message_goes_back_into_the_composer_and_long_ones_collapse(live_url, browser, scripted):
    scripted.behaviour.canned_reply = "Received."
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    start_session(page, live_url, "Long ones")
    long_text = "The log line 0123456789 repeats. " * 95  # 3,135 characters: shown collapsed
    send(page, long_text)
    wait_idle(page)
    message = page.locator(".msg-user").last
    body = message.locator(".body")
    collapsed = body.bounding_box()["height"]
    message.locator("[data-action=expand]").click()
    assert body.bounding_box()["height"] > collapsed * 1.5, "Show all shows all"
    # Far too long for the context: refused, and back in the composer to be shortened.
    huge = "word " * 10_000
    send(page, huge)
    wait_idle(page)
    assert "does not fit" in page.locator("#chat-status").inner_text()
    assert page.locator("#composer-text").input_value() == huge
    context.close()


def test_branch_from_here_opens_the_branch_which_its_parent_lists(live_url, browser, scripted):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    start_session(page, live_url, "Tides")
    for question, answer in (("Where is the pier?", "North of the harbour."), ("How deep?", "Four metres.")):
        scripted.behaviour.canned_reply = answer
        send(page, question)
        wait_idle(page)
        page.wait_for_selector(f".msg-assistant:has-text('{answer}')")
    parent_url = page.url
    # The reply arrived over the socket: its button posts with the CSRF token of the page's hx-headers.
    page.locator(".msg-assistant:has-text('North of the harbour.') button:has-text('Branch from here')").click()
    page.wait_for_url(lambda url: url != parent_url)
    page.wait_for_selector("body[data-socket=open]", state="attached")
    line = page.locator(".branch-line").inner_text()
    assert "Branch of Tides at message 2" in line
    assert page.locator(".msg").count() == 2
    assert page.locator(".msg-assistant:has-text('Four metres.')").count() == 0
    branch_url = page.url
    page.locator(".branch-line a").click()
    page.wait_for_url(parent_url)
    page.locator("details.branches summary").click()
    assert "1 branch of this session" in page.locator("details.branches").inner_text()
    assert page.locator(f"details.branches a[href='{branch_url.removeprefix(live_url)}']").count() == 1
    context.close()
