"""In a real browser: an artifact recorded in the side panel is pinned in the prompt the context
window page shows; a search hit opens the chat page on its message, just below the sticky
header, highlighted."""

from __future__ import annotations

import pytest

from tests.factories import log_in

MODEL = "embedded/smollm2-135m"
NEEDLE = "quokkaferry"
TARGET = 41  # well down a 70-message history, so the page has to scroll to it
FILLER = "A paragraph of plain notes about the harbour works, long enough to take a few lines on the page. " * 2


def import_session(page, live_url: str, title: str, count: int) -> str:
    """A session of ``count`` messages imported through the API with the browser's own login;
    message ``TARGET`` (1-based) holds ``NEEDLE``. Returns the session's id."""
    messages = [
        {
            "role": "user" if n % 2 else "assistant",
            "parts": [
                {
                    "type": "text",
                    "text": f"Message {n}. " + (f"The {NEEDLE} leaves at noon. " if n == TARGET else "") + FILLER,
                }
            ],
        }
        for n in range(1, count + 1)
    ]
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"{live_url}/api/sessions/import?context_size=8192&title={title}",
        data={"model": MODEL, "messages": messages},
        headers={"X-CSRFToken": csrf, "Referer": live_url + "/"},
    )
    assert response.status == 201, response.text()
    return str(response.json()["id"])


@pytest.fixture
def logged_in(live_url, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    log_in(page, live_url)
    page.wait_for_url(live_url + "/")
    yield page
    context.close()


def test_an_artifact_recorded_in_the_side_panel_is_in_the_context_window(live_url, logged_in):
    page = logged_in
    session_id = import_session(page, live_url, "Artifacts", 4)
    page.goto(f"{live_url}/sessions/{session_id}/")
    page.fill("#goals-panel input[name=path]", "docs/harbour-plan.md")
    page.select_option("#goals-panel select[name=action]", "created")
    page.click("#goals-panel button:has-text('Record')")
    page.wait_for_selector("#goals-panel .artifacts code:has-text('docs/harbour-plan.md')")

    page.goto(f"{live_url}/sessions/{session_id}/context/")
    assert "Created docs/harbour-plan.md" in page.locator(".block-goal pre").inner_text()
    meter = page.locator("#context-meter .context-usage").inner_text()
    total = page.locator("#prompt-total .prompt-tokens").inner_text()
    assert meter.startswith(f"{total} / "), (meter, total)


@pytest.mark.parametrize(
    "viewport", [{"width": 1400, "height": 900}, {"width": 390, "height": 844}], ids=["desktop", "phone"]
)
def test_a_search_hit_lands_below_the_header_highlighted(live_url, browser, viewport):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    log_in(page, live_url)
    page.wait_for_url(live_url + "/")
    session_id = import_session(page, live_url, f"Ferries {viewport['width']}", 70)

    page.goto(f"{live_url}/search/?q={NEEDLE}")
    group = page.locator(f"#result-session-{session_id}")
    assert group.locator("mark").all_inner_texts() == [NEEDLE]
    group.locator("a.hit-link").first.click()
    page.wait_for_url(f"**/sessions/{session_id}/**#msg-*")
    target = page.locator("article.msg.target")
    target.wait_for()
    assert f"The {NEEDLE} leaves at noon." in target.inner_text()
    assert target.evaluate("node => '#' + node.id") == page.evaluate("location.hash")
    # The jump settles once the page stops scrolling; then the message's top is just below the header.
    page.wait_for_function(
        """() => {
            const box = document.querySelector('article.msg.target').getBoundingClientRect();
            const header = document.getElementById('meter-sticky').getBoundingClientRect();
            return box.top >= header.bottom && box.top < header.bottom + 40 && box.top < window.innerHeight;
        }"""
    )
    assert page.evaluate("window.scrollY") > 0
    outline = target.evaluate("node => getComputedStyle(node).outlineStyle")
    assert outline == "solid"
    context.close()
