"""The chat as someone who uses Open WebUI or LibreChat daily expects it, in Chromium against a real
server and the test model server: a phone layout without horizontal scroll, Send and Stop that
follow the turn, Esc to stop, Retry after Stop (also after a reload), regenerate, edit and copy.

The test model server holds a generation (Stop before the first token) and answers with given
texts (a regenerated reply that differs from the first), so nothing here waits on luck."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import log_in
from tests.support.timing import scaled

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
REPLY_TIMEOUT_MS = scaled(180_000)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}


@pytest.fixture
def scripted(model_server):
    """The model server answering with given texts, and back to normal afterwards."""
    yield model_server
    model_server.reset()


def start_session(page, live_url: str, title: str, context_size: str = "4096") -> None:
    log_in(page, live_url)
    new_session(page, title, context_size)


def new_session(page, title: str, context_size: str = "4096") -> None:
    """From the sessions list's new-session form."""
    form = page.locator("form[action$='/sessions/new/']")
    form.locator("input[name=title]").fill(title)
    form.locator("select[name=model]").select_option("embedded/smollm2-135m")
    form.locator("select[name=context_size]").select_option(context_size)
    form.locator("button:has-text('Start')").click()
    page.wait_for_selector("body[data-socket=open]", state="attached")


def send(page, text: str) -> None:
    """Enter sends; the page marks the turn as streaming as it sends (before any frame comes back)."""
    page.fill("#composer-text", text)
    page.keyboard.press("Enter")


def wait_idle(page) -> None:
    page.wait_for_selector("#turn-state[data-streaming='0']", state="attached", timeout=REPLY_TIMEOUT_MS)


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

    # Regenerate: a new reply; the old one stays in the full history, out of the context.
    first = page.locator(".msg-assistant:has-text('The tide range is 3.2 m.')")
    scripted.behaviour.canned_reply = "Tides rise and fall by 3.2 m."
    first.locator("[data-action=regenerate]").click()
    wait_idle(page)
    page.wait_for_selector(".msg-assistant:has-text('Tides rise and fall by 3.2 m.') [data-action=regenerate]")
    assert "history only" in first.inner_text()
    assert first.locator("[data-action=regenerate]").count() == 0

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
    original = page.locator(".msg-user", has_text="What is the tide range?").filter(has_not_text="north pier")
    assert "history only" in original.inner_text()
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
