"""Facts survive compression, in the browser: a 2K chat states a region and a path in its first
turn and locks a decision; after three rollovers, with that turn long gone from the active context,
the context window page still shows all three in the prompt, and the timeline says what was kept."""

from __future__ import annotations

import re

from tests.factories import log_in
from tests.support.timing import scaled

REPLY_TIMEOUT_MS = scaled(300_000)  # a turn may wait for a rollover on a busy machine
FIRST_TURN = (
    "Please remember this for the whole project: we deploy the billing API to eu-west-1, "
    "and its data lives under /srv/app/data on the database host."
)
# Long user turns with no region or path in them: they fill the 2K context, so user messages
# (never compressed) alone pass the trigger and the rollovers take the first turn out.
NOTES = (
    "More notes on the harbour works, no need to answer at length: the crews start early, the "
    "weather decides the schedule, the suppliers deliver on weekdays, the inspectors visit once "
    "a month, the budget review is on Fridays and the minutes are shared with every team lead. "
)


def compressions(page) -> int:
    text = page.locator("#context-meter").inner_text()
    match = re.search(r"· (\d+) compressions?", text)
    return int(match.group(1)) if match else 0


def send_and_wait(page, turn: int, text: str) -> None:
    page.fill("#composer-text", text)
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#reply-{turn}", state="attached", timeout=REPLY_TIMEOUT_MS)
    page.wait_for_selector(f"#reply-{turn}", state="detached", timeout=REPLY_TIMEOUT_MS)


def test_a_region_a_path_and_a_locked_decision_survive_three_rollovers(live_url, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    log_in(page, live_url)
    # The sessions page also lists the other tests' sessions, each with a (hidden) rename field.
    new = page.locator("form[action$='/sessions/new/']")
    new.locator("input[name=title]").fill("Billing rollout")
    new.locator("select[name=model]").select_option("embedded/smollm2-135m")
    new.locator("select[name=context_size]").select_option("2048")
    new.locator("button:has-text('Start')").click()
    page.wait_for_selector("#composer")
    page.wait_for_function("() => document.body.dataset.socket === 'open'")

    page.fill("input[name=description][placeholder='New decision']", "Invoices are kept for 10 years")
    page.locator("form[hx-post*='/decisions/'] button[type=submit]").click()
    page.locator(".decision:has-text('Invoices are kept for 10 years') button:has-text('Lock')").click()
    page.wait_for_selector(".decision.locked:has-text('Invoices are kept for 10 years')")

    send_and_wait(page, 1, FIRST_TURN)
    turn = 1
    while compressions(page) < 3:
        turn += 1
        assert turn <= 60, f"three rollovers were expected long before turn {turn}"
        send_and_wait(page, turn, f"Turn {turn}. {NOTES * 4}")

    viewer = context.new_page()
    viewer.goto(page.url + "context/")
    messages = " ".join(viewer.locator(".block-message").all_inner_texts())
    assert "eu-west-1" not in messages, "the first turn has left the active context"
    # In the checkpoint's summary (the extract of fact clauses) or its ledger, with what it is about.
    checkpoints = " ".join(viewer.locator(".block-checkpoint").all_inner_texts())
    assert "billing API to eu-west-1" in checkpoints
    assert "/srv/app/data" in checkpoints
    assert "Invoices are kept for 10 years" in viewer.locator(".block-goal").inner_text()

    timeline = context.new_page()
    timeline.goto(page.url + "timeline/")
    active = timeline.locator(".checkpoint:not(.inactive)").first
    for ledger in active.locator("details.ledger").all():
        ledger.locator("summary").click()
    assert "eu-west-1" in active.inner_text()
    assert "in the prompt" in timeline.locator(".revision .retention").last.inner_text()
    context.close()
