"""Issue 47 in Chromium at a desktop's 1280×800 and a phone's 390×844: a new session's reliability,
pages no wider than their window (snapshots, tokens), fixed bars at most a fifth of the window, code
that scrolls sideways, and markdown rendered while the reply streams (sanitized)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.factories import REPLY_TIMEOUT_MS, log_in, new_session, send, wait_idle

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop-1280x800", "phone-390x844"])
# Where the screenshots go for a person to look at; not part of any assertion.
SHOTS = Path(os.environ.get("OLLM_E2E_SHOTS", "/tmp/ollm-e2e-shots"))

# The e2e server cuts replies at 40 of the model's tokens: a run of dashes is long in few of them.
LONG_LINE = "    return 0  # " + "-" * 400
CODE_REPLY = f"```python\ndef total():\n{LONG_LINE}\n```\n"


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def open_session(browser, live_url: str, title: str, viewport: dict[str, int]):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    log_in(page, live_url)
    new_session(page, title)
    return context, page


def page_width(page) -> tuple[int, int]:
    return int(page.evaluate("() => document.documentElement.scrollWidth")), int(
        page.evaluate("() => window.innerWidth")
    )


def fits(page) -> bool:
    width, window = page_width(page)
    return width <= window


@VIEWPORTS
def test_a_new_session_shows_no_reliability_warning(live_url, browser, viewport):
    context, page = open_session(browser, live_url, f"Fresh {viewport['width']}", viewport)
    meter = page.locator("#context-meter .reliability").inner_text()
    assert "nothing compressed yet" in meter
    assert "Critical" not in meter
    assert page.locator("#context-meter .rel-critical, #context-meter .rel-low").count() == 0
    # Its dot is the neutral one, not the danger colour.
    dot = page.locator("#context-meter .reliability .dot").evaluate("(d) => getComputedStyle(d).backgroundColor")
    danger = page.evaluate(
        "() => { const s = document.createElement('span'); s.style.color = 'var(--danger)';"
        " document.body.append(s); const c = getComputedStyle(s).color; s.remove(); return c; }"
    )
    assert dot != danger
    assert page.locator("#reliability-warning .warning").count() == 0
    # The headline and the line under it each say which measure they are.
    assert "% of the context" in page.locator("#context-meter .context-usage").inner_text()
    shot(page, f"new-session-{viewport['width']}")

    page.goto(live_url + "/")
    row = page.locator(f"tr:has-text('Fresh {viewport['width']}')").first
    assert "nothing compressed yet" in row.inner_text()
    assert row.locator(".rel-critical").count() == 0
    assert "OLLM_" not in page.content()
    context.close()


@VIEWPORTS
def test_no_page_is_wider_than_its_window_and_code_scrolls(live_url, browser, scripted, viewport):
    scripted.behaviour.canned_reply = CODE_REPLY
    context, page = open_session(browser, live_url, f"Wide {viewport['width']}", viewport)
    send(page, "Write the total function")
    wait_idle(page)
    assert fits(page), page_width(page)

    # The code block: one line per source line, the long one scrolling inside its block.
    pre = page.locator("#history .msg-assistant .code-block pre").last
    assert pre.evaluate("(p) => getComputedStyle(p).whiteSpace") == "pre"
    assert pre.evaluate("(p) => p.scrollWidth > p.clientWidth"), "the long line scrolls sideways"
    line_height = float(pre.evaluate("(p) => parseFloat(getComputedStyle(p).lineHeight)"))
    lines = pre.evaluate("(p) => p.textContent.replace(/\\n$/, '').split('\\n').length")
    assert pre.evaluate("(p) => p.clientHeight") < (lines + 1) * line_height + 40, "no line wrapped"

    # Snapshots in the side panel: the page still fits, and each Restore… is whole on the screen.
    if viewport == PHONE:
        page.locator("#meter-sticky [data-action=toggle-side]").click()
    for _ in range(2):
        page.evaluate("() => { document.getElementById('progress').textContent = ''; }")
        count = page.locator("#snapshots-panel tbody tr[id^=snapshot-]").count()
        page.locator("#snapshots-panel button:has-text('Snapshot now')").click()
        page.wait_for_function(
            "(n) => document.querySelectorAll('#snapshots-panel tbody tr[id^=snapshot-]').length > n", arg=count
        )
        # The socket's event frame brings the panel again: wait for it, so the panel stays put.
        page.wait_for_function(
            "(n) => (document.getElementById('progress').textContent || '').includes('Snapshot')"
            " && document.querySelectorAll('#snapshots-panel tbody tr[id^=snapshot-]').length > n",
            arg=count,
        )
    assert fits(page), page_width(page)
    restore = page.locator("#snapshots-panel button:has-text('Restore')").first
    restore.scroll_into_view_if_needed()
    box = restore.bounding_box()
    panel = page.locator("#snapshots-panel").bounding_box()
    assert box is not None
    assert panel is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= viewport["width"]
    # Whole inside its panel too, scrolled into view if the table scrolls.
    assert box["x"] + box["width"] <= panel["x"] + panel["width"] + 1
    shot(page, f"snapshots-{viewport['width']}")
    if viewport == PHONE:
        page.locator("#side-panels [data-action=toggle-side]").click()

    # The fixed bars (the meter at the top, the composer at the bottom) leave four fifths of the window.
    heights = page.evaluate(
        "() => [document.getElementById('meter-sticky').getBoundingClientRect().height,"
        " document.getElementById('composer').getBoundingClientRect().height]"
    )
    shot(page, f"chat-{viewport['width']}")
    assert sum(heights) <= viewport["height"] / 5, heights

    # The API tokens page, with a token whose name is long.
    page.goto(live_url + "/account/tokens/")
    page.fill("input[name=name]", "A script with a rather long name that runs every night" * 2)
    page.locator("button:has-text('Create token')").click()
    page.wait_for_selector(".token-created")
    assert fits(page), page_width(page)
    shot(page, f"tokens-{viewport['width']}")
    page.goto(live_url + "/")
    assert fits(page), page_width(page)
    context.close()


STREAMED = "**Bold** <script>window.pwned=2</script>\n\n```python\ndef f():\n    return 1\n"

# Records what the streaming reply's rendering showed at each change, until the stored reply replaces it.
WATCH = """() => {
  window.seen = [];
  new MutationObserver(() => {
    const body = document.querySelector('#history .streaming .body.rendered');
    if (!body || !body.textContent) { return; }
    window.seen.push({pre: !!body.querySelector('pre'), strong: !!body.querySelector('strong'),
      fence: body.textContent.includes('```'), unsafe: !!body.querySelector('img, script'),
      raw: body.previousElementSibling.getBoundingClientRect().height <= 1});
  }).observe(document.getElementById('history'), {childList: true, subtree: true, characterData: true});
}"""


@VIEWPORTS
def test_markdown_renders_while_the_reply_streams(live_url, browser, scripted, viewport):
    scripted.behaviour.canned_reply = STREAMED + "    # more\n" * 20
    scripted.behaviour.chunk_delay_seconds = 0.2
    context, page = open_session(browser, live_url, f"Streaming {viewport['width']}", viewport)
    page.evaluate(WATCH)
    send(page, "Show me")
    page.wait_for_selector("#history .streaming .body.rendered pre", timeout=REPLY_TIMEOUT_MS)
    shot(page, f"streaming-{viewport['width']}")
    wait_idle(page)
    seen = page.evaluate("() => window.seen")
    assert len(seen) > 3, "the reply streamed in several frames"
    # The unclosed fence showed as code while the reply was still coming, bold as bold, never raw.
    assert any(frame["pre"] for frame in seen)
    assert any(frame["strong"] for frame in seen)
    assert not any(frame["fence"] for frame in seen), "no raw ``` while streaming"
    # What the model wrote is text: no script or image element, nothing ran; the raw text stays hidden.
    assert not any(frame["unsafe"] for frame in seen)
    assert all(frame["raw"] for frame in seen)
    assert page.evaluate("() => window.pwned === undefined")
    context.close()
