"""Every artifact is pinned in the prompt, and the context window page counts the prompt as the meter does."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from chat.models import Checkpoint
from chat.selectors.context import pinned_block, session_budget, session_context, session_context_read, session_window
from chat.selectors.prompt import session_prompt
from chat.services.goals import artifact_record, decision_record, goal_apply_markers, goal_create
from chat.services.messages import message_create
from chat.services.sessions import session_create
from engine.core.aging import Level
from engine.core.budget import REPLY_MIN_TOKENS
from engine.core.window import CheckpointView, render_checkpoint, window_budget
from engine.llm.embedded import MODEL_NAME
from engine.resources import count_text_tokens

pytestmark = pytest.mark.django_db

METER_LINE = re.compile(r'<strong class="context-usage">([\d,]+) / ([\d,]+) tokens')
PAGE_TOTAL = re.compile(r'<strong class="prompt-tokens">([\d,]+)</strong> tokens of ([\d,]+)')
BLOCK_TOKENS = re.compile(r"· (\d+) tokens</span></header>")


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _figures(client, session) -> tuple[int, int, list[int], str]:
    """The meter's used tokens, the page's total, each block's count, and the page."""
    page = client.get(reverse("chat:context_window", args=[session.pk])).content.decode()
    meter, page_total = METER_LINE.search(page), PAGE_TOTAL.search(page)
    assert meter is not None, page
    assert page_total is not None, page
    assert meter.group(2) == page_total.group(2)
    return _number(meter.group(1)), _number(page_total.group(1)), [int(n) for n in BLOCK_TOKENS.findall(page)], page


def _checkpoint(session, number: int, summary: str) -> Checkpoint:
    text = render_checkpoint(CheckpointView(number, Level.OLD, f"Messages {number}-{number + 1}", summary))
    return Checkpoint.objects.create(
        session=session,
        number=number,
        level=Level.OLD,
        first_position=number,
        last_position=number + 1,
        summary=summary,
        original_tokens=200,
        current_tokens=count_text_tokens(text) + 4,
    )


def test_an_artifact_recorded_in_the_side_panel_is_pinned_without_a_goal(owner_client, chat_session):
    before = session_budget(session=chat_session).system_prompt_tokens
    response = owner_client.post(
        reverse("context:artifact_new", args=[chat_session.pk]), {"path": "src/panel.py", "action": "created"}
    )
    assert response.status_code == 200
    block = pinned_block(session=chat_session)
    assert block == "Artifacts:\nCreated src/panel.py"
    assert session_budget(session=chat_session).system_prompt_tokens == before + count_text_tokens(block)
    window = owner_client.get(reverse("chat:context_window", args=[chat_session.pk])).content.decode()
    assert "Created src/panel.py" in window


def test_artifacts_of_the_panel_the_api_and_markers_all_reach_the_goal_block(owner_client, api, user):
    session = session_create(owner=user, model="llama3.2:3b", context_size=4096, system_prompt="Be brief.")
    old_goal = goal_create(session=session, description="Draft the schema")
    artifact_record(session=session, path="docs/schema.md", action="created", goal=old_goal)
    goal = goal_create(session=session, description="Ship the login page")  # pauses the first goal
    owner_client.post(reverse("context:artifact_new", args=[session.pk]), {"path": "src/panel.py", "action": "created"})
    assert (
        api.post(
            f"/api/goals/{goal.pk}/artifacts",
            {"path": "src/api.py", "action": "modified"},
            content_type="application/json",
        ).status_code
        == 201
    )
    goal_apply_markers(session=session, text="Done.\n[ARTIFACT] Created src/marker.py")
    artifact_record(session=session, path="src/panel.py", action="modified")
    block = pinned_block(session=session)
    assert block.startswith("ACTIVE GOAL: Ship the login page")
    assert block.splitlines()[-5:] == [
        "Artifacts:",
        "Created docs/schema.md",
        "Modified src/panel.py",
        "Modified src/api.py",
        "Created src/marker.py",
    ]
    assert session_budget(session=session).system_prompt_tokens == session.system_prompt_tokens + count_text_tokens(
        block
    )


@pytest.mark.parametrize("model", ["llama3.2:3b", MODEL_NAME], ids=["ollama-estimate", "embedded-exact"])
@pytest.mark.parametrize("with_goal", [True, False], ids=["goal", "no-goal"])
def test_the_context_window_page_and_the_meter_agree_to_the_token(owner_client, user, app_gateway, model, with_goal):
    session = session_create(owner=user, model=model, context_size=2048, system_prompt="Answer in one sentence.")
    seen = []

    def agree() -> str:
        meter, total, blocks, page = _figures(owner_client, session)
        assert meter == total == sum(blocks) == session_budget(session=session).used
        # The turn checks the budget from the window it sends: the same figures, part by part.
        assert window_budget(session_window(session=session), max_tokens=session.max_tokens) == session_budget(
            session=session
        )
        assert total == session_prompt(session=session).budget_tokens
        # The turn reports the context from the rows its window was read from: the report a page reads.
        assert session_context_read(session=session).report == session_context(session=session)
        seen.append(total)
        return page

    agree()
    if with_goal:
        goal = goal_create(session=session, description="Move the billing database to eu-west-1")
        goal_apply_markers(session=session, text="[CHECKPOINT] Copy the tables - IN PROGRESS\n[NEXT] Switch reads")
        assert goal.checkpoints.exists()
    decision_record(session=session, description="Keep PostgreSQL 16", locked=True)
    decision_record(session=session, description="Maybe add a replica")
    owner_client.post(reverse("context:artifact_new", args=[session.pk]), {"path": "db/plan.sql", "action": "created"})
    goal_apply_markers(session=session, text="[ARTIFACT] Modified deploy/billing.yaml")
    page = agree()
    for pinned in ("Created db/plan.sql", "Modified deploy/billing.yaml", "🔒 Keep PostgreSQL 16"):
        assert pinned in page
    for n in range(3):
        message_create(session=session, role="user", content=f"Question {n}: how long does the copy of table {n} take?")
        message_create(session=session, role="assistant", content=f"About {n + 2} minutes for table {n}, " * 6)
    agree()
    _checkpoint(session, 1, "The user planned the copy of the billing tables; db-billing-01 first.")
    _checkpoint(session, 2, "Tables were copied in order; the replica is optional.")
    page = agree()
    assert page.count('class="block block-checkpoint"') == 2
    assert len(set(seen)) == len(seen), "every step changed the prompt"


def test_the_context_window_page_says_when_the_next_turn_compresses_first(owner_client, user):
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048)
    message_create(session=session, role="user", content="Hello there")
    url = reverse("chat:context_window", args=[session.pk])
    assert 'id="prompt-over-room"' not in owner_client.get(url).content.decode()
    for number in range(6):
        message_create(session=session, role="assistant", content=f"Reply {number}: " + "the tide came in. " * 80)
    page = owner_client.get(url).content.decode()
    warning = re.search(r'<p class="warning" id="prompt-over-room"[^>]*>(.*?)</p>', page, re.S)
    assert warning is not None, page
    assert "the next turn compresses first" in warning.group(1)
    assert f"over the {session.max_tokens - REPLY_MIN_TOKENS:,}" in warning.group(1)
