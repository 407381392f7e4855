"""Issue 47, item 9: attach a text file to a message in Chromium, on a desktop and a phone. The file shows
as a chip in the composer and then on the stored message, and its text reaches the prompt (GET
/api/sessions/{id}/prompt); a binary file or one over the limit is refused at once with a clear error, and
nothing typed is lost."""

from __future__ import annotations

import pytest

from tests.factories import REPLY_TIMEOUT_MS, log_in, new_session, send, wait_idle

NOTES = "# Pier notes\n\nThe north pier rests on 12 piles of basalt-grey oak; the load limit is 40 t.\n"


def no_horizontal_scroll(page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
def test_an_attached_file_reaches_the_prompt_and_shows_as_a_chip(live_url, browser, scripted, viewport):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    log_in(page, live_url)
    new_session(page, f"Attach {viewport['width']}")
    scripted.behaviour.canned_reply = "The load limit is 40 t."
    files = page.locator("#attach-input")

    # A binary file, then one over the limit: refused at once, the typed message kept.
    page.fill("#composer-text", "What is the load limit?")
    files.set_input_files(files={"name": "photo.txt", "mimeType": "text/plain", "buffer": b"\x89PNG\r\n\x1a\n\x00\x00"})
    page.wait_for_selector("#attachment-error:has-text('photo.txt is not a text file')")
    files.set_input_files(files={"name": "big.csv", "mimeType": "text/csv", "buffer": b"a,b\n" * 30_000})
    page.wait_for_selector("#attachment-error:has-text('big.csv is 120,000 bytes')")
    assert page.locator("#attachment-chip").is_hidden()
    assert page.input_value("#composer-text") == "What is the load limit?"

    # A markdown file: its chip in the composer, then on the message; its text in the prompt.
    files.set_input_files(files={"name": "pier-notes.md", "mimeType": "text/markdown", "buffer": NOTES.encode()})
    page.wait_for_selector("#attachment-chip:has-text('pier-notes.md')")
    assert page.locator("#attachment-error").is_hidden()
    assert no_horizontal_scroll(page)
    send(page, "What is the load limit?")
    wait_idle(page)
    page.wait_for_selector(".msg-user .attachment-chip:has-text('pier-notes.md')", timeout=REPLY_TIMEOUT_MS)
    assert page.locator("#attachment-chip").is_hidden(), "the composer's attachment went with the message"
    assert page.input_value("#attachment-text") == ""
    assert "basalt-grey oak" in page.locator(".msg-user .body").inner_text()
    assert no_horizontal_scroll(page)
    session_id = page.locator("#chat-page").get_attribute("data-session")
    prompt = page.request.get(f"{live_url}/api/sessions/{session_id}/prompt")
    assert prompt.ok, prompt.text()
    assert "basalt-grey oak; the load limit is 40 t." in prompt.text()
    assert "Attached file: pier-notes.md" in prompt.text()
    context.close()
