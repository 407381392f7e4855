"""A regenerated reply's versions in Chromium, on a phone in dark mode: ‹ 2/2 › after the regeneration,
‹ goes back to the first reply, and the context window then holds that one, not the other."""

from __future__ import annotations

from tests.factories import log_in, new_session, send, wait_idle

PHONE = {"width": 390, "height": 844}


def test_a_regenerated_reply_switches_back_to_the_first_version(live_url, browser, scripted):
    context = browser.new_context(viewport=PHONE, color_scheme="dark")
    page = context.new_page()
    log_in(page, live_url)
    new_session(page, "Versions")
    scripted.behaviour.canned_reply = "The ferry leaves at 9:40."
    send(page, "When does the ferry leave?")
    wait_idle(page)
    page.wait_for_selector(".msg-assistant:has-text('The ferry leaves at 9:40.')")
    assert page.locator(".versions").count() == 0, "one version: no switcher"

    scripted.behaviour.canned_reply = "It leaves at 10:15 on Sundays."
    page.locator(".msg-assistant [data-action=regenerate]").click()
    wait_idle(page)
    switcher = page.locator(".msg-assistant .versions")
    switcher.locator(".version-number:has-text('2/2')").wait_for()
    assert page.locator(".msg-assistant").count() == 1, "the first reply is behind the switcher, not stacked"
    assert "10:15" in page.locator(".msg-assistant").inner_text()
    assert switcher.get_by_role("button", name="Next version").is_disabled()

    switcher.get_by_role("button", name="Previous version (1 of 2)").click()
    page.locator(".msg-assistant .version-number:has-text('1/2')").wait_for()
    reply = page.locator(".msg-assistant")
    assert reply.count() == 1
    assert "The ferry leaves at 9:40." in reply.inner_text()
    assert "history only" not in reply.inner_text(), "the chosen version is in the context"
    assert reply.locator("[data-action=regenerate]").count() == 1, "the version gone back to is the latest reply"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "fits a phone"
    # The switcher is drawn in the dark theme's muted colour (#9aa3b5), not the light one.
    colour = page.evaluate("getComputedStyle(document.querySelector('.versions')).color")
    assert colour == "rgb(154, 163, 181)"

    window = context.new_page()
    window.goto(page.url + "context/")
    prompt = window.locator("main").inner_text()
    assert "The ferry leaves at 9:40." in prompt
    assert "10:15" not in prompt

    page.reload()
    page.locator(".msg-assistant .version-number:has-text('1/2')").wait_for()
    page.locator(".msg-assistant").get_by_role("button", name="Next version (2 of 2)").click()
    page.locator(".msg-assistant .version-number:has-text('2/2')").wait_for()
    window.reload()
    prompt = window.locator("main").inner_text()
    assert "10:15" in prompt
    assert "The ferry leaves at 9:40." not in prompt
    context.close()
