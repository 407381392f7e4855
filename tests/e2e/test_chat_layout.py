"""What a daily user of ChatGPT or Open WebUI expects of the chat's look and feel (issue 35), in
Chromium against a real server: the newest message and the progress of "Compress now" above the
sticky composer, open <details> kept through a refresh, dark mode, highlighted code with Copy,
touch typing, the error pages, rename, a phone's top bar and sessions list, shortcuts."""

from __future__ import annotations

import pytest

from tests.factories import SCREENSHOTS, log_in, new_session, send, wait_idle

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
TOUCH_PHONE = {"viewport": PHONE, "has_touch": True, "is_mobile": True}


def open_chat(browser, live_url: str, title: str, **options):
    """A new browser context (``options``: its viewport, touch, colour scheme...), logged in, on a
    new session ``title``; the context and its page."""
    options.setdefault("viewport", DESKTOP)
    context = browser.new_context(**options)
    page = context.new_page()
    log_in(page, live_url)
    new_session(page, title)
    return context, page


def bottom_over_composer(page, selector: str) -> float:
    """How far ``selector``'s bottom reaches below the composer's top (≤ 0: all of it above)."""
    return float(
        page.evaluate(
            "(s) => document.querySelector(s).getBoundingClientRect().bottom"
            " - document.getElementById('composer').getBoundingClientRect().top",
            selector,
        )
    )


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop-1280x800", "phone-390x844"])
def test_the_newest_message_and_progress_are_above_the_composer(live_url, browser, scripted, viewport):
    scripted.behaviour.canned_reply = "A reply long enough to fill a few lines of the screen. " * 6
    context, page = open_chat(browser, live_url, f"In view {viewport['width']}", viewport=viewport)
    for turn in range(4):
        send(page, f"Question {turn}")
        wait_idle(page)
    assert page.evaluate("document.documentElement.scrollHeight > window.innerHeight"), "a history that scrolls"
    assert bottom_over_composer(page, "#history > .msg:last-of-type") <= 0, "after a reply"

    # A session opened anew: the page scrolls to its end, the newest message clear of the composer.
    page.reload()
    page.wait_for_selector("body[data-socket=open]", state="attached")
    assert page.evaluate("window.scrollY") > 0, "the page scrolled to the end"
    assert bottom_over_composer(page, "#history > .msg:last-of-type") <= 0, "on opening the session"

    # "Compress now" answers under the history: its line is in view too.
    page.locator("#composer button:has-text('Compress now')").click()
    page.wait_for_selector("#progress:not(:empty)")
    # A function, not an expression: Playwright evals a bare expression, which the CSP refuses.
    page.wait_for_function(
        "() => document.getElementById('progress').getBoundingClientRect().bottom"
        " <= document.getElementById('composer').getBoundingClientRect().top"
    )
    context.close()


def mark_and_open(page, selector: str) -> None:
    """Opens the <details> at ``selector`` and marks that node, to tell it from the one a swap brings."""
    page.locator(f"{selector} > summary").click()
    page.evaluate("(s) => { document.querySelector(s).dataset.before = '1'; }", selector)
    assert page.locator(selector).evaluate("(d) => d.open")


def swapped_and_open(page, selector: str) -> bool:
    """Waits for the marked node to be swapped out (never on time), then says whether its successor is open."""
    page.wait_for_function("(s) => !document.querySelector(s).dataset.before", arg=selector, timeout=30_000)
    return bool(page.locator(selector).evaluate("(d) => d.open"))


def test_what_the_user_opened_stays_open_through_a_refresh(live_url, browser, scripted):
    scripted.behaviour.canned_reply = "Noted."
    context, page = open_chat(browser, live_url, "Open details")

    # The chat page's meter comes again with every reply's frames.
    help_ = "#context-meter details.reliability-help"
    mark_and_open(page, help_)
    send(page, "A question")
    wait_idle(page)
    assert swapped_and_open(page, help_), "the reliability help stays open through a reply"

    # The aging timeline refreshes itself every few seconds.
    timeline = context.new_page()
    timeline.goto(page.url + "timeline/")
    mark_and_open(timeline, help_)
    swaps = int(timeline.evaluate("Number(document.body.dataset.swaps || 0)"))
    assert swapped_and_open(timeline, help_), "the reliability help stays open through a refresh"
    assert int(timeline.evaluate("Number(document.body.dataset.swaps)")) > swaps
    # And one closed again stays closed through the next.
    timeline.locator(f"{help_} > summary").click()
    timeline.evaluate("(s) => { document.querySelector(s).dataset.before = '1'; }", help_)
    assert not swapped_and_open(timeline, help_), "closed stays closed"
    context.close()


def background_luminance(page) -> float:
    """The body's computed background, 0 (black) to 1 (white)."""
    rgb = page.evaluate("getComputedStyle(document.body).backgroundColor")
    red, green, blue = (int(part) for part in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def test_dark_mode_follows_the_system_and_the_toggle_is_kept(live_url, browser):
    context = browser.new_context(viewport=DESKTOP, color_scheme="dark")
    page = context.new_page()
    log_in(page, live_url)
    page.wait_for_selector("form[action$='/sessions/new/']")
    assert background_luminance(page) < 0.2, "dark with the system dark"
    toggle = page.locator("[data-theme-toggle]")
    assert toggle.get_attribute("data-theme") == "auto"
    toggle.click()  # auto → dark
    toggle.click()  # dark → light
    assert background_luminance(page) > 0.8, "light once chosen, whatever the system says"
    page.reload()
    assert page.locator("[data-theme-toggle]").get_attribute("data-theme") == "light"
    assert background_luminance(page) > 0.8, "the choice is kept across pages"
    page.locator("[data-theme-toggle]").click()  # light → auto: the system's dark again
    assert background_luminance(page) < 0.2
    assert page.evaluate("localStorage.getItem('ollm-theme')") is None
    context.close()

    light = browser.new_context(viewport=DESKTOP, color_scheme="light")
    page = light.new_page()
    log_in(page, live_url)
    page.wait_for_selector("form[action$='/sessions/new/']")
    assert background_luminance(page) > 0.8, "light with the system light"
    page.locator("[data-theme-toggle]").click()  # auto → dark
    assert background_luminance(page) < 0.2, "dark once chosen"
    light.close()


def test_code_blocks_are_highlighted_and_each_copy_button_copies_its_code(live_url, browser, scripted):
    # Short: the e2e server caps a reply at 40 tokens.
    first, second = "def f(x):\n    return x  # m\n", "echo '<b>' && ls\n"
    scripted.behaviour.canned_reply = f"```python\n{first}```\n```sh\n{second}```"
    # Dark, for the dark screenshot of the chat (docs/screenshots).
    context, page = open_chat(browser, live_url, "Code blocks", color_scheme="dark")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_url)
    send(page, "Show me code")
    wait_idle(page)
    blocks = page.locator(".msg-assistant .code-block")
    assert blocks.count() == 2
    keyword = blocks.first.locator("pre span.k", has_text="def")
    assert keyword.count() == 1, "highlighted by the server"
    colours = keyword.evaluate("(k) => [getComputedStyle(k).color, getComputedStyle(k.closest('pre')).color]")
    assert colours[0] != colours[1], "a keyword stands out from the code around it"
    assert blocks.nth(1).locator("pre").inner_text().startswith("echo '<b>'"), "the code's text, escaped"
    for block, code in ((blocks.nth(1), second), (blocks.first, first)):
        block.locator("[data-action=copy-code]").click()
        page.wait_for_function(
            "(b) => b.textContent === 'Copied'", arg=block.locator("[data-action=copy-code]").element_handle()
        )
        assert page.evaluate("navigator.clipboard.readText()") == code
    page.screenshot(path=str(SCREENSHOTS / "chat-dark.png"))
    context.close()


def test_on_a_touch_screen_enter_adds_a_new_line_and_send_sends(live_url, browser, scripted):
    scripted.behaviour.canned_reply = "Two lines received."
    context, page = open_chat(browser, live_url, "Touch", **TOUCH_PHONE, color_scheme="dark")
    assert page.evaluate("matchMedia('(pointer: coarse)').matches"), "Chromium emulates a touch screen"
    composer = page.locator("#composer-text")
    assert "Enter adds a new line" in composer.get_attribute("placeholder")
    composer.click()
    page.keyboard.type("First line")
    page.keyboard.press("Enter")
    page.keyboard.type("second line")
    assert composer.input_value() == "First line\nsecond line", "Enter added a new line"
    assert page.locator(".msg-user").count() == 0, "and sent nothing"
    page.locator("#send-button").tap()
    wait_idle(page)
    page.wait_for_selector(".msg-assistant:has-text('Two lines received.')")
    assert page.locator(".msg-user .body").inner_text() == "First line\nsecond line"
    assert "Enter adds a new line" in composer.get_attribute("placeholder"), "also on the field a frame brought anew"
    page.screenshot(path=str(SCREENSHOTS / "phone-chat-dark.png"))
    context.close()

    # A keyboard (pointer: fine): Enter sends, as the placeholder says.
    context, page = open_chat(browser, live_url, "Keyboard")
    assert "Enter sends" in page.locator("#composer-text").get_attribute("placeholder")
    send(page, "Sent by Enter")
    page.wait_for_selector(".msg-user:has-text('Sent by Enter')")
    context.close()


def test_a_missing_page_is_the_sites_404_at_the_phones_width(live_url, browser):
    context = browser.new_context(viewport=PHONE, is_mobile=True)
    page = context.new_page()
    response = page.goto(live_url + "/no-such-page/")
    assert response.status == 404
    assert page.locator("h1").inner_text() == "Page not found"
    assert page.locator("header.topbar").is_visible(), "the site's own page, not Django's bare one"
    assert page.evaluate("window.innerWidth") == PHONE["width"], "laid out at the phone's width (viewport tag)"
    context.close()


def test_rename_from_the_chat_pages_title_updates_the_tab(live_url, browser):
    context, page = open_chat(browser, live_url, "Before")
    assert page.title() == "Before · ollm-site"
    page.locator("#session-title summary").click()
    page.locator("#session-title input[name=title]").fill("After <b>rename</b>")
    page.locator("#session-title button:has-text('Save')").click()
    page.wait_for_function("() => document.querySelector('#session-title h1').textContent === 'After <b>rename</b>'")
    assert page.title() == "After <b>rename</b> · ollm-site", "the tab's title follows"
    assert not page.locator("#session-title details").evaluate("(d) => d.open"), "the form closes once saved"
    assert page.locator("#session-title h1 b").count() == 0, "escaped"
    context.close()


def test_a_phones_top_bar_is_one_line_with_search_and_links_a_tap_away(live_url, browser):
    context = browser.new_context(**TOUCH_PHONE)
    page = context.new_page()
    log_in(page, live_url)
    page.wait_for_selector("form[action$='/sessions/new/']")
    bar = page.locator("header.topbar")
    assert bar.bounding_box()["height"] < 60, "one line"
    sessions_link = bar.locator("nav a:has-text('Sessions')")
    assert not sessions_link.is_visible(), "the links are behind the menu"
    page.locator("[data-menu-toggle]").tap()
    assert sessions_link.is_visible()
    assert bar.locator("nav button:has-text('Log out')").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "the menu stays on the screen"
    page.locator("main").tap()
    assert not sessions_link.is_visible(), "a tap elsewhere closes it"

    search = bar.locator("input[name=q]")
    assert search.bounding_box()["width"] < 50, "the search box is an icon"
    search.tap()
    assert search.bounding_box()["width"] > PHONE["width"] * 0.8, "and opens over the bar when tapped"
    search.fill("harbour")
    search.press("Enter")
    page.wait_for_url("**/search/?q=harbour")
    context.close()

    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    log_in(page, live_url)
    page.wait_for_selector("form[action$='/sessions/new/']")
    assert not page.locator("[data-menu-toggle]").is_visible(), "no menu button on a desktop"
    assert page.locator("header.topbar nav a:has-text('Sessions')").is_visible()
    context.close()


def test_the_sessions_list_is_cards_on_a_phone_with_every_control_on_the_screen(live_url, browser):
    title = "A card with a title long enough to wrap on a phone's narrow screen"
    context, page = open_chat(browser, live_url, title, **TOUCH_PHONE)
    page.goto(live_url + "/")
    rows = page.locator("table.sessions tbody tr")
    assert rows.count() >= 1
    beyond = """() => [...document.querySelectorAll('table.sessions a, table.sessions button, table.sessions input')]
        .filter((node) => node.checkVisibility())
        .filter((node) => node.getBoundingClientRect().right > window.innerWidth)
        .map((node) => node.outerHTML.slice(0, 80))"""
    assert page.evaluate(beyond) == [], "no control beyond the right edge"
    rows.first.locator(".inline-rename summary").tap()
    assert rows.first.locator(".inline-rename input[name=title]").is_visible()
    assert page.evaluate(beyond) == [], "nor with the rename field open"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    first = rows.first
    assert first.locator("a:has-text('Delete…')").is_visible()
    assert first.locator("a:has-text('Export')").is_visible()
    context.close()


PLACEHOLDERS_CLIPPED = """() => [...document.querySelectorAll('form.settings input[type=number][placeholder]')]
  .filter((input) => {
    const style = getComputedStyle(input);
    const context = document.createElement('canvas').getContext('2d');
    context.font = style.font;
    const room = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 16;  // spinner
    return context.measureText(input.placeholder).width > room;
}).map((input) => input.name + ': ' + input.placeholder)"""


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop-1280x800", "phone-390x844"])
def test_settings_placeholders_are_whole_and_the_login_form_stacks(live_url, browser, viewport):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.goto(live_url + "/accounts/login/")
    form = page.locator("main form").bounding_box()
    username = page.locator("input[name=username]").bounding_box()
    password = page.locator("input[name=password]").bounding_box()
    assert username["width"] > form["width"] * 0.9, "each field the form's width"
    assert password["y"] > username["y"] + username["height"], "one field under the other"
    log_in(page, live_url)
    new_session(page, f"Settings {viewport['width']}")
    if viewport == PHONE:
        page.click("#meter-sticky [data-action=toggle-side]")
    assert page.locator("form.settings input[type=number][placeholder]").count() >= 5
    assert page.evaluate(PLACEHOLDERS_CLIPPED) == [], "no placeholder cut off"
    context.close()


def test_keyboard_shortcuts_are_listed_and_work(live_url, browser, scripted):
    scripted.behaviour.canned_reply = "First answer."
    context, page = open_chat(browser, live_url, "Shortcuts")
    send(page, "A question")
    wait_idle(page)
    page.locator("main h1").click()  # the focus off the message field: single keys are shortcuts then

    page.keyboard.press("?")
    dialog = page.locator("dialog#shortcuts")
    assert dialog.is_visible()
    assert "regenerate the last reply" in dialog.inner_text()
    page.keyboard.press("Escape")
    assert not dialog.is_visible()

    page.keyboard.press("c")
    assert page.evaluate("document.activeElement.id") == "composer-text"
    assert page.locator("#composer-text").input_value() == "", "the key went to the shortcut, not the field"
    page.keyboard.type("typed c and r")
    assert page.locator("#composer-text").input_value() == "typed c and r", "in a field, keys are text"
    page.locator("main h1").click()

    scripted.behaviour.canned_reply = "Second answer."
    page.keyboard.press("r")
    page.wait_for_selector(".msg-assistant:has-text('Second answer.')")
    wait_idle(page)

    page.locator("main h1").click()
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.name") == "q"
    page.locator("main h1").click()
    page.keyboard.press("n")
    page.wait_for_url(live_url + "/#new-session")
    # The new session's title, ready to type (once the page has loaded).
    page.wait_for_function("() => document.activeElement.name === 'title'")
    context.close()


def test_the_context_page_follows_the_session_but_waits_while_text_is_selected(live_url, browser, scripted):
    scripted.behaviour.canned_reply = "Noted."
    context, page = open_chat(browser, live_url, "Context follows")
    window = context.new_page()
    window.goto(page.url + "context/")
    before = window.locator("#prompt-total .prompt-tokens").inner_text()
    send(page, "A message the context page should show without a reload")
    wait_idle(page)
    window.wait_for_function(
        "(before) => document.querySelector('#prompt-total .prompt-tokens').textContent !== before",
        arg=before,
        timeout=30_000,
    )
    assert "A message the context page should show" in window.locator("#context-body").inner_text()

    # Text selected (to copy a block): the refresh waits, so the selection stays.
    window.evaluate(
        """() => {
            window.refreshes = [];
            document.addEventListener('htmx:beforeRequest', (event) => window.refreshes.push(event.defaultPrevented));
            const range = document.createRange();
            range.selectNodeContents(document.querySelector('#context-body pre'));
            getSelection().removeAllRanges();
            getSelection().addRange(range);
        }"""
    )
    window.wait_for_function("() => window.refreshes.length > 0", timeout=30_000)
    assert window.evaluate("window.refreshes") == [True], "the refresh was held back"
    assert window.evaluate("getSelection().toString()"), "the selection is still there"
    window.evaluate("() => getSelection().removeAllRanges()")
    window.wait_for_function("() => window.refreshes.includes(false)", timeout=30_000)
    context.close()
