"""The spec's configuration per session, rapid re-compression, and starting over from a session."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from chat.models import Checkpoint, ContextEvent, Decision, Goal, Session
from chat.selectors.context import session_budget, session_config
from chat.selectors.prompt import session_prompt
from chat.services.checkpoints import CheckpointDraft, compression_commit
from chat.services.compression import compression_run, session_effective_limits
from chat.services.goals import decision_record, goal_checkpoint_set, goal_create
from chat.services.messages import message_create
from chat.services.session_settings import session_set_context_settings
from chat.services.sessions import session_continue, session_create
from engine.core.budget import Budget
from engine.core.ledger import memory_budget
from engine.resources import context_profile
from tests.factories import settings_form as form
from tests.support.model_server import SERVED_MODEL

pytestmark = pytest.mark.django_db


def test_settings_are_saved_from_the_form_and_used(chat_session, owner_client):
    url = reverse("chat:session_settings", args=[chat_session.pk])
    response = owner_client.post(
        url,
        form(strategy="truncate", preserve_recent="512", summary_model="qwen2.5:0.5b", auto_create=None),
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert b"Saved." in response.content
    assert b'id="context-meter"' in response.content
    chat_session.refresh_from_db()
    config = session_config(chat_session)
    assert (config.compression.strategy, config.compression.preserve_recent) == ("truncate", 512)
    assert config.snapshots.auto_create is False
    assert chat_session.summarizer == "qwen2.5:0.5b"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"preserve_recent": "50000"}, "compression.preserve_recent is 50,000 tokens, more than this session can hold"),
        ({"preserve_recent": "4533"}, "at most 4,532 (a third of the 13,596 tokens its context leaves"),
        ({"auto_threshold": "1.5"}, "snapshots.auto_threshold must be a number in (0, 1]"),
        ({"auto_threshold": "0"}, "snapshots.auto_threshold must be a number in (0, 1]"),
        ({"summary_max_tokens": "-3"}, "compression.summary_max_tokens must be a whole number of tokens above 0"),
        ({"preserve_recent": "lots"}, "compression.preserve_recent must be a whole number"),
        ({"strategy": "forget"}, "compression.strategy must be one of summarize, truncate"),
        (
            {"summary_max_tokens": "2267"},
            "summary_max_tokens is 2,267 tokens, more than this session can hold: at most 2,266",
        ),
    ],
)
def test_bad_settings_are_refused_clearly_and_nothing_changes(chat_session, owner_client, changes, message):
    response = owner_client.post(reverse("chat:session_settings", args=[chat_session.pk]), form(**changes))
    assert response.status_code == 422
    assert message.encode() in response.content
    chat_session.refresh_from_db()
    assert chat_session.settings == {}


def test_turning_compression_off_says_what_will_happen(chat_session, owner_client):
    owner_client.post(reverse("chat:session_settings", args=[chat_session.pk]), form(compression_enabled=None))
    page = owner_client.get(reverse("chat:chat", args=[chat_session.pk])).content.decode()
    assert "Compression is off: when the context fills up, a message that does not fit is refused" in page
    assert compression_run(session_id=chat_session.pk, reason="test", force=True).status == "skipped"


def test_other_users_cannot_change_settings(chat_session, other_user):
    client = Client()
    client.force_login(other_user)
    url = reverse("chat:session_settings", args=[chat_session.pk])
    assert client.post(url, form(compression_enabled=None)).status_code == 404
    assert client.post(reverse("chat:session_continue", args=[chat_session.pk])).status_code == 404


def _compressed_once(session):
    replies = []
    for n in range(4):
        message_create(session=session, role="user", content=f"q{n}")
        replies.append(message_create(session=session, role="assistant", content=f"answer {n} " * 30))
    compression_commit(session=session, message_ids=[replies[0].id], draft=CheckpointDraft(summary="a0"))
    session.refresh_from_db()
    return replies


def test_the_trigger_never_compresses_again_without_new_messages(chat_session, monkeypatch):
    _compressed_once(chat_session)
    # Over the trigger (a compression that freed too little): the troubleshooting's rapid re-compression.
    monkeypatch.setattr(Budget, "compression_due", property(lambda self: True))
    outcome = compression_run(session_id=chat_session.pk, reason="again")
    assert (outcome.status, outcome.reason) == ("skipped", "no new messages since compression 1")
    assert Checkpoint.objects.filter(session=chat_session).count() == 1
    message_create(session=chat_session, role="user", content="one more")
    assert "no new messages" not in compression_run(session_id=chat_session.pk, reason="new").reason
    reasons = ContextEvent.objects.filter(session=chat_session, type="compression-skipped").values_list(
        "payload__reason", flat=True
    )
    assert [r for r in reasons if r.startswith("no new messages")] == ["no new messages since compression 1"]


def test_compress_now_takes_what_the_selection_still_allows(chat_session):
    session_set_context_settings(
        session=chat_session, settings={"compression": {"strategy": "truncate", "preserve_recent": 64}}
    )
    replies = _compressed_once(chat_session)
    outcome = compression_run(session_id=chat_session.pk, reason="Compress now", force=True)
    assert outcome.status == "compressed", outcome.reason
    second = Checkpoint.objects.filter(session=chat_session).order_by("-number")[0]
    assert set(second.messages.values_list("id", flat=True)) >= {replies[1].id, replies[2].id}


def test_compress_now_says_in_figures_why_it_cannot(chat_session):
    _compressed_once(chat_session)
    outcome = compression_run(session_id=chat_session.pk, reason="Compress now", force=True)
    assert outcome.status == "skipped"
    assert outcome.reason.startswith("nothing to compress: of the ")
    assert "are yours or the system's (never compressed)" in outcome.reason


def test_start_a_new_conversation_from_here_carries_what_matters(chat_session, app_gateway):
    goal = goal_create(session=chat_session, description="Ship the login page", priority="high")
    goal_checkpoint_set(goal=goal, description="Design the form", status="completed")
    decision_record(session=chat_session, description="Use JWT", locked=True)
    decision_record(session=chat_session, description="Maybe use OAuth", locked=False)
    replies = []
    for n in range(3):
        message_create(session=chat_session, role="user", content=f"Where does the handler live? {n}")
        replies.append(
            message_create(session=chat_session, role="assistant", content=f"In src/auth/login.ts, timeout 30 s. {n}")
        )
    compression_commit(
        session=chat_session,
        message_ids=[replies[0].id],
        draft=CheckpointDraft(summary="The handler is in src/auth/login.ts.", files_modified=("src/auth/login.ts",)),
    )
    chat_session.refresh_from_db()

    successor = session_continue(session=chat_session)
    assert successor.pk != chat_session.pk
    assert successor.owner_id == chat_session.owner_id
    assert (successor.title, successor.model, successor.max_tokens) == (
        "New conversation (continued)",
        chat_session.model,
        chat_session.max_tokens,
    )
    assert successor.messages.count() == 0
    assert successor.compression_count == 0
    carried = Goal.objects.get(session=successor)
    assert (carried.description, carried.priority, carried.status) == ("Ship the login page", "high", "active")
    assert list(carried.checkpoints.values_list("description", "status")) == [("Design the form", "completed")]
    assert list(Decision.objects.filter(session=successor).values_list("description", "locked")) == [("Use JWT", True)]
    final = Checkpoint.objects.get(session=successor)
    assert final.level == 0
    assert "src/auth/login.ts" in final.summary
    assert "timeout 30 s" in final.summary
    # One summarized checkpoint, not the old checkpoints' rendered text glued to the messages.
    assert "[Checkpoint" not in final.summary
    assert final.files_modified == ["src/auth/login.ts"]
    assert ["token", "30 s"] in final.facts  # measured against the reference; the summary holds it
    assert final.retention == 1.0
    assert final.revisions.count() == 1
    assert session_budget(session=successor).checkpoint_tokens == final.current_tokens
    prompt = session_prompt(session=successor, gateway=app_gateway)
    assert [block.kind for block in prompt.blocks] == ["system", "goal", "checkpoint"]
    # The old session is untouched.
    assert chat_session.messages.count() == 6
    assert Checkpoint.objects.filter(session=chat_session).count() == 1


def test_a_long_conversation_carries_over_within_the_ultra_target_and_the_ledger_share(user, app_gateway):
    session = session_create(owner=user, model=SERVED_MODEL, context_size=2048)
    for n in range(48):
        message_create(session=session, role="user", content=f"Which region for service {n}? Say it plainly.")
        message_create(
            session=session,
            role="assistant",
            content=f"Service {n} runs in eu-west-{n} from /srv/app/svc{n}/data on db-{n:02d}.internal. " * 3,
        )
    successor = session_continue(session=session)
    final = Checkpoint.objects.get(session=successor)
    # The ultra checkpoint's summary and ledger together take at most the memory's share (profiles.json: 50%
    # of 1,700 at 2K), as cl100k counts them; the model's tokenizer counts that text up to about 15% more.
    memory = memory_budget(max_tokens=1700, tier=context_profile(2048).tier)
    assert final.current_tokens <= memory * 1.15 + 40  # the heading and separators
    budget = session_budget(session=successor)
    assert budget.checkpoint_tokens == final.current_tokens
    assert budget.used == budget.system_prompt_tokens + final.current_tokens
    dropped = final.revisions.get().ledger_dropped
    assert dropped, "forty-eight services' facts do not fit in one 2K ledger"
    assert any("eu-west-47 " in text for _, text in final.ledger)  # the newest stay
    assert not any("eu-west-0 " in text for _, text in final.ledger)


def test_the_continue_button_shows_below_40_percent_and_redirects(user, owner_client):
    session = session_create(owner=user, model="llama3.2:3b", context_size=4096)
    message_create(session=session, role="user", content="hi")
    reply = message_create(session=session, role="assistant", content="hello " * 40)
    compression_commit(session=session, message_ids=[reply.id], draft=CheckpointDraft(summary="greeting"))
    page = owner_client.get(reverse("chat:chat", args=[session.pk])).content.decode()
    assert "Start a new conversation from here" in page
    # The button posts with htmx (the CSRF header of the page), also when the panel came over the socket.
    assert f'hx-post="/sessions/{session.pk}/continue/"' in page
    response = owner_client.post(reverse("chat:session_continue", args=[session.pk]), HTTP_HX_REQUEST="true")
    successor = Session.objects.exclude(pk=session.pk).get()
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/sessions/{successor.pk}/"


def test_settings_service_refuses_unknown_keys():
    with pytest.raises(ValidationError, match="compression has unknown settings: speed"):
        session_set_context_settings(
            session=Session(max_tokens=3400, system_prompt_tokens=0), settings={"compression": {"speed": 1}}
        )


def test_the_panel_of_a_2k_session_offers_only_what_its_budget_holds(user, owner_client):
    """Issue 23: a 2K session (1,700 tokens) was offered "preserve recent 2048" and "summary max 1024";
    the panel now shows the values this session uses and accepts at most what its budget holds."""
    session = session_create(owner=user, model="llama3.2:3b", context_size=2048)
    limits = session_effective_limits(session)
    room = session.max_tokens - session.system_prompt_tokens
    assert (limits.reply_max_tokens, limits.summary_max_tokens, limits.preserve_recent) == (
        255,
        room // 6,
        room // 3,
    )
    page = owner_client.get(reverse("chat:chat", args=[session.pk])).content.decode()
    assert f'max="{room // 3}" value="" placeholder="auto: {room // 3}"' in page
    assert f'max="{room // 6}" value="" placeholder="auto: {room // 6}"' in page
    assert "2048" not in page.split('id="settings-panel"')[1].split("</section>")[0]
    assert (
        f"replies ≤ 255, preserve recent {room // 3}, summaries ≤ {room // 6}, rollover checkpoint ≤ {room // 6 // 2}"
        in page
    )

    # Empty token fields follow the context size: nothing is stored for them.
    url = reverse("chat:session_settings", args=[session.pk])
    response = owner_client.post(url, form(preserve_recent="", summary_max_tokens="", strategy="truncate"))
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.settings["compression"] == {"enabled": True, "strategy": "truncate"}
    assert session_effective_limits(session).summary_max_tokens == room // 6

    # A value the budget holds wins and is shown as set; one over it is refused, form and API alike.
    owner_client.post(url, form(preserve_recent="300", summary_max_tokens="", strategy="summarize"))
    session.refresh_from_db()
    assert session_effective_limits(session).preserve_recent == 300
    assert (
        'value="300" placeholder="auto: 300"'
        in owner_client.get(reverse("chat:chat", args=[session.pk])).content.decode()
    )
    refused = owner_client.post(url, form(preserve_recent="", summary_max_tokens="1024"))
    assert refused.status_code == 422
    message = f"compression.summary_max_tokens is 1,024 tokens, more than this session can hold: at most {room // 6:,}"
    assert message in refused.content.decode()
    session.refresh_from_db()
    assert session.settings["compression"]["preserve_recent"] == 300
    with pytest.raises(ValidationError, match=message):
        session_set_context_settings(session=session, settings={"compression": {"summary_max_tokens": 1024}})
