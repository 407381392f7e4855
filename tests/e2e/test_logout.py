"""A logout ends every open page's socket at once (issue 36), and the page says so instead of
promising a reconnection that the server will refuse."""

from __future__ import annotations

from tests.factories import log_in, new_session


def test_a_logout_in_another_tab_tells_the_chat_page_and_offers_a_login_back(live_url, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    chat = context.new_page()
    log_in(chat, live_url)
    new_session(chat, "Logged out elsewhere")
    chat.fill("#composer-text", "A draft that must not be lost.")
    other = context.new_page()
    other.goto(live_url + "/")
    other.locator("form[action$='/accounts/logout/'] button").click()
    other.wait_for_url("**/accounts/login/**")

    # Without the chat page sending anything: the server closes its socket (4401).
    chat.wait_for_selector("body[data-socket=ended]", state="attached")
    connection = chat.locator("#connection")
    assert "You are logged out" in connection.inner_text()
    assert "reconnecting" not in connection.inner_text()
    login = connection.locator("a")
    assert login.get_attribute("href").startswith("/accounts/login/?next=%2Fsessions%2F")
    assert chat.input_value("#composer-text") == "A draft that must not be lost."
    login.click()
    chat.wait_for_url("**/accounts/login/**")
    context.close()
