"""Issue 47, item 10: switch a session's model from the chat page in Chromium, on a desktop and a phone,
on a server that serves the bundled model and an Ollama (the model server's stand-in). The page then names
the new model, the meter's counts are the new model's (estimates on Ollama, exact on the bundled model),
and the aging timeline records the switch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.factories import log_in, new_session, send, wait_idle
from tests.support.live_server import serve
from tests.support.model_server import SERVED_MODEL

EMBEDDED = "embedded/smollm2-135m"


@pytest.fixture(scope="module")
def two_models_url(tmp_path_factory, model_server) -> Iterator[str]:
    env = {"OLLM_LLM_BACKEND": "auto", "OLLAMA_HOST": model_server.url}
    with serve(tmp_path_factory.mktemp("switch"), model_server, with_user=True, env=env) as url:
        yield url


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
def test_the_model_switches_from_the_chat_page(two_models_url, browser, scripted, viewport):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    log_in(page, two_models_url)
    new_session(page, f"Switch {viewport['width']}")
    scripted.behaviour.canned_reply = "The pier has twelve piles."
    send(page, "How many piles hold the pier?")
    wait_idle(page)
    assert EMBEDDED in page.locator(".model-line").inner_text()
    assert page.locator(".count-kind").first.inner_text() == "exact"

    page.locator("#model-switch summary").click()
    page.locator("#model-switch select[name=model]").select_option(SERVED_MODEL)
    assert page.locator("#model-switch button[type=submit]").is_visible()
    page.locator("#model-switch button[type=submit]").click()
    page.wait_for_selector(f"#chat-status:has-text('Switched from {EMBEDDED} to {SERVED_MODEL}')")
    page.wait_for_selector("body[data-socket=open]", state="attached")
    assert SERVED_MODEL in page.locator(".model-line").inner_text()
    # Recounted: Ollama's counts are the calibrated estimate, the bundled model's were exact.
    assert page.locator(".count-kind").first.inner_text() == "≈ estimated"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # The conversation goes on with the new model.
    send(page, "And the load limit?")
    wait_idle(page)
    assert page.locator(".msg-assistant").count() == 2

    page.locator("a:has-text('Aging timeline')").click()
    page.wait_for_selector(f"text=Model switched from {EMBEDDED} to {SERVED_MODEL}")
    context.close()
