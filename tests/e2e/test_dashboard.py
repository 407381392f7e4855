"""The dashboard in a real browser against a real server and the real embedded model:
log in, start a 2K session, chat until the context is compressed, watch the meter and the
timeline follow without a reload, lock a decision, restore a snapshot."""

from __future__ import annotations

import re

from tests.factories import SCREENSHOTS, log_in
from tests.support.timing import scaled

REPLY_TIMEOUT_MS = scaled(300_000)  # a turn may wait for a compression on a busy machine
LONG_MESSAGE = (
    "Here are my notes on the harbour project, please keep them in mind: the north pier is 240 m long, "
    "the crane lifts 40 t, the tide range is 3.2 m, the concrete mix is C35/45, and the deadline is 14 June. "
)


def used_tokens(page) -> int:
    text = page.locator("#context-meter .context-usage").inner_text()
    match = re.search(r"([\d,]+) / ", text)
    assert match, text
    return int(match.group(1).replace(",", ""))


def test_a_long_conversation_in_the_browser(live_url, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    log_in(page, live_url)

    # The sessions page also lists the other tests' sessions, each with a (hidden) rename field.
    new = page.locator("form[action$='/sessions/new/']")
    new.locator("input[name=title]").fill("Harbour <b>notes</b>")
    new.locator("select[name=model]").select_option("embedded/smollm2-135m")
    new.locator("select[name=context_size]").select_option("2048")
    new.locator("input[name=goal]").fill("Plan the harbour works")
    new.locator("button:has-text('Start')").click()
    page.wait_for_selector("#composer")
    assert page.locator("#session-title h1").inner_text() == "Harbour <b>notes</b>"
    page.wait_for_function("() => document.body.dataset.socket === 'open'")

    timeline = context.new_page()
    timeline.goto(page.url + "timeline/")
    assert "No compression yet." in timeline.content()

    before = used_tokens(page)
    for turn in range(1, 12):
        page.fill("#composer-text", f"Turn {turn}. {LONG_MESSAGE * 2}")
        page.keyboard.press("Enter")  # Enter sends
        page.wait_for_selector(f"#reply-{turn}", state="attached", timeout=REPLY_TIMEOUT_MS)
        page.wait_for_selector(f"#reply-{turn}", state="detached", timeout=REPLY_TIMEOUT_MS)
        assert page.locator("#composer-text").input_value() == ""
        after = used_tokens(page)
        assert after != before, "the meter follows each message without a reload"
        before = after
        if page.locator("details.compressed").count() or "1 compression" in page.locator("#context-meter").inner_text():
            break
    page.wait_for_function(
        "() => document.querySelector('#context-meter').innerText.includes('· 1 compression')",
        timeout=REPLY_TIMEOUT_MS,
    )
    page.wait_for_selector("details.compressed summary", timeout=REPLY_TIMEOUT_MS)
    assert "compressed into checkpoint #1" in page.locator("details.compressed summary").first.inner_text()
    page.screenshot(path=str(SCREENSHOTS / "chat.png"), full_page=False)

    # The timeline page, opened before the compression, shows it without a reload.
    timeline.wait_for_selector("#events tr.event-rollover-complete, #events tr.event-compressed", timeout=30_000)
    assert "No compression yet." not in timeline.content()
    timeline.screenshot(path=str(SCREENSHOTS / "timeline.png"), full_page=True)

    # Lock a decision: it turns visibly locked and is pinned into the prompt.
    page.fill("input[name=description][placeholder='New decision']", "Use C35/45 concrete")
    page.locator("form[hx-post*='/decisions/'] button[type=submit]").click()
    page.wait_for_selector(".decision:has-text('Use C35/45 concrete') button:has-text('Lock')")
    page.locator(".decision:has-text('Use C35/45 concrete') button:has-text('Lock')").click()
    page.wait_for_selector(".decision.locked:has-text('Use C35/45 concrete')")

    viewer = context.new_page()
    viewer.goto(page.url + "context/")
    assert "Use C35/45 concrete" in viewer.locator(".block-goal").inner_text()
    viewer.screenshot(path=str(SCREENSHOTS / "context-window.png"), full_page=True)

    # Restore the automatic snapshot taken before the compression, on the page: it asks first, then
    # every message's label, the meter and the panels show the restored state without a reload, and a
    # line says what was restored (issue 47, item 6).
    page.evaluate("() => { window.notReloaded = true; }")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#snapshots-panel tr:has-text('auto') button:has-text('Restore')").last.click()
    page.wait_for_selector("#progress:has-text('Restored snapshot')", timeout=30_000)
    assert page.evaluate("() => window.notReloaded === true"), "no reload"
    page.wait_for_function("() => !document.querySelector('details.compressed')")
    assert "compressed into checkpoint" not in page.locator("#history").inner_text()
    assert "nothing compressed yet" in page.locator("#context-meter").inner_text()
    assert page.locator("#snapshots-panel tr:has-text('auto')").count() >= 2, "the undo snapshot is listed"
    assert page.locator(".badge:has-text('not in the context')").count() >= 1
    context.close()
