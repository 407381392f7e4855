"""A fresh install in a real browser: no account yet, so `/` offers to create the first one; it is
the administrator, lands logged in on the sessions list and chats; then that page is gone."""

from __future__ import annotations

from tests.support.timing import scaled

PASSWORD = "harbour-crane-40t"
REPLY_TIMEOUT_MS = scaled(120_000)


def test_the_first_account_is_made_in_the_browser_and_then_the_page_is_gone(empty_live_url, browser):
    context = browser.new_context()
    page = context.new_page()
    refused = []
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )

    page.goto(empty_live_url + "/")
    assert page.url == empty_live_url + "/account/first/"
    assert page.locator("h1").inner_text() == "Create the first account"
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", "not the same")
    page.click("button[type=submit]")
    page.wait_for_selector(".error")
    assert "The two password fields didn" in page.locator(".error").inner_text()

    page.fill("input[name=password1]", PASSWORD)
    page.fill("input[name=password2]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(empty_live_url + "/")
    nav = page.locator("header nav")
    assert "Log out ada" in nav.inner_text()
    assert nav.locator("a", has_text="Admin").count() == 1  # staff

    page.fill("input[name=title]", "First chat")
    page.select_option("select[name=model]", "embedded/smollm2-135m")
    page.select_option("select[name=context_size]", "2048")
    page.click("button:has-text('Start')")
    page.wait_for_selector("#composer")
    assert page.locator("#session-title h1").inner_text() == "First chat"
    page.wait_for_function("() => document.body.dataset.socket === 'open'")
    page.fill("#composer-text", "Hello! Say hi back.")
    page.keyboard.press("Enter")
    page.wait_for_selector("#reply-1", state="attached", timeout=REPLY_TIMEOUT_MS)
    page.wait_for_selector("#reply-1", state="detached", timeout=REPLY_TIMEOUT_MS)  # the stored reply took its place
    assert page.locator(".msg-assistant .body").count() == 1

    # Gone, for the administrator and for anyone else, by GET and by POST.
    page.goto(empty_live_url + "/account/first/")
    assert page.url == empty_live_url + "/accounts/login/"
    other = browser.new_context()
    stranger = other.new_page()
    stranger.goto(empty_live_url + "/")
    assert stranger.url == empty_live_url + "/accounts/login/?next=/"
    assert stranger.locator("h1").inner_text() == "Log in"
    token = stranger.locator("input[name=csrfmiddlewaretoken]").first.input_value()
    posted = stranger.request.post(
        empty_live_url + "/account/first/",
        form={"csrfmiddlewaretoken": token, "username": "mallory", "password1": PASSWORD, "password2": PASSWORD},
        max_redirects=0,
    )
    assert (posted.status, posted.headers["location"]) == (302, "/accounts/login/")
    stranger.goto(empty_live_url + "/accounts/login/")
    stranger.fill("input[name=username]", "mallory")
    stranger.fill("input[name=password]", PASSWORD)
    stranger.click("button[type=submit]")
    stranger.wait_for_selector(".error")
    assert "didn't match" in stranger.locator(".error").inner_text()
    assert refused == []
    other.close()
    context.close()
