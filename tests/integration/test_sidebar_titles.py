"""Issue 47, item 1: a new chat's title written after its first reply (by the bundled model, or from the
first message), branches titled as branches, archive and unarchive, and New chat with the account's defaults."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from chat.models import ChatDefaults, Session
from chat.services.messages import message_create
from chat.services.sessions import session_branch, session_create, session_update
from chat.services.titles import session_title_write
from chat.services.turn import TurnSend, turn_take
from engine.core.titles import TITLE_MAX_CHARS
from engine.llm.embedded import MODEL_NAME
from tests.support.timing import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def scripted_server(fake_ollama):
    """The tests' model server answering as a test says, and back to normal afterwards."""
    yield fake_ollama
    fake_ollama.reset()


QUESTION = "How do I keep basil alive on a windowsill through the winter?"


def _untitled(user):
    session = session_create(owner=user, model=MODEL_NAME, context_size=2048, auto_title=True)
    assert session.title == "New conversation"
    assert session.title_pending
    return session


def _exchange(session, reply="Give it six hours of light and water it when the soil is dry."):
    message_create(session=session, role="user", content=QUESTION)
    message_create(session=session, role="assistant", content=reply, done_reason="stop")


def test_the_bundled_model_titles_a_session_in_the_background_slot(user, embedded_gateway, model_server):
    session = _untitled(user)
    _exchange(session)
    title = session_title_write(session_id=session.pk, gateway=embedded_gateway)
    assert title, "a title was written"
    session.refresh_from_db()
    assert session.title == title
    assert not session.title_pending
    assert title != "New conversation"
    assert "\n" not in title
    assert len(title) <= TITLE_MAX_CHARS
    assert title.strip("\"'“”`.") == title, f"no quotes around it: {title!r}"
    # Asked as background work (a turn would go first), as a compression's summaries are.
    assert model_server.behaviour.served[-1].priority == "background"
    # Once titled, it is not titled again.
    assert session_title_write(session_id=session.pk, gateway=embedded_gateway) is None


@pytest.mark.parametrize("answer", ['"Sure!"', "\n\n", "**Title:** ..."])
def test_an_unusable_answer_gives_the_first_words_of_the_first_message(user, embedded_gateway, scripted_server, answer):
    scripted_server.behaviour.canned_reply = answer
    session = _untitled(user)
    _exchange(session)
    assert session_title_write(session_id=session.pk, gateway=embedded_gateway) == "How do I keep basil alive"


def test_a_failing_model_gives_the_first_words_too(user, embedded_gateway, scripted_server):
    scripted_server.behaviour.fail_status = 500
    session = _untitled(user)
    _exchange(session)
    assert session_title_write(session_id=session.pk, gateway=embedded_gateway) == "How do I keep basil alive"


def test_no_title_before_the_first_reply_nor_over_the_users_own(user, embedded_gateway):
    session = _untitled(user)
    message_create(session=session, role="user", content=QUESTION)
    assert session_title_write(session_id=session.pk, gateway=embedded_gateway) is None
    assert Session.objects.get(pk=session.pk).title_pending
    session_update(session=session, title="Basil")
    message_create(session=session, role="assistant", content="Light.", done_reason="stop")
    assert session_title_write(session_id=session.pk, gateway=embedded_gateway) is None
    assert Session.objects.get(pk=session.pk).title == "Basil"
    titled = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="Mine", auto_title=True)
    assert not titled.title_pending


async def test_a_turns_first_reply_has_the_session_titled_after_it(user, app_gateway):
    session = await sync_to_async(_untitled)(user)
    await turn_take(session_id=session.pk, variant=TurnSend(QUESTION), gateway=app_gateway)

    def titled():
        return not Session.objects.get(pk=session.pk).title_pending

    await sync_to_async(wait_until)(titled, timeout=120, what="the session's title")
    title = (await Session.objects.aget(pk=session.pk)).title
    assert title
    assert title != "New conversation"


def test_a_branch_is_titled_as_a_branch_of_its_parent(user):
    parent = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="Basil care")
    message_create(session=parent, role="user", content=QUESTION)
    at = message_create(session=parent, role="assistant", content="Light.", done_reason="stop")
    branch = session_branch(session=parent, at_message=at)
    assert branch.title == "Basil care (branch at message 2)"
    assert not branch.title_pending
    parent.refresh_from_db()
    assert parent.title == "Basil care"
    long = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="x" * 200)
    message_create(session=long, role="user", content="hi")
    assert session_branch(session=long, at_message=long.messages.get()).title.endswith("(branch at message 1)")


def test_archive_hides_a_session_from_the_lists_and_unarchive_brings_it_back(user, other_user, owner_client):
    kept = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="Kept chat")
    gone = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="Archived chat")
    url = reverse("chat:session_archived", args=[gone.pk])
    assert owner_client.post(url, {"archived": "1"}).status_code == 302
    listing = owner_client.get(reverse("chat:session_list")).content.decode()
    assert "Kept chat" in listing
    assert "Archived chat" not in listing
    assert "Show archived (1)" in listing
    archived = owner_client.get(reverse("chat:session_list") + "?archived=1").content.decode()
    assert "Archived chat" in archived
    assert "Kept chat" not in archived
    sidebar = owner_client.get(reverse("chat:chat", args=[kept.pk])).content.decode()
    assert 'id="sidebar"' in sidebar
    assert "Kept chat" in sidebar
    assert "Archived chat" not in sidebar
    shown = owner_client.get(reverse("chat:sidebar") + f"?archived=1&current={kept.pk}").content.decode()
    assert "Archived chat" in shown
    assert "Unarchive" in shown
    # Still the user's, whole, and still opened by its link.
    assert owner_client.get(reverse("chat:chat", args=[gone.pk])).status_code == 200

    # Someone else can neither archive nor unarchive it; an unsafe request needs the CSRF token.
    stranger = Client()
    stranger.force_login(other_user)
    assert stranger.post(url, {"archived": "0"}).status_code == 404
    csrf_checked = Client(enforce_csrf_checks=True)
    csrf_checked.force_login(user)
    assert csrf_checked.post(url, {"archived": "0"}).status_code == 403
    assert Session.objects.get(pk=gone.pk).archived_at is not None

    answer = owner_client.post(url, {"archived": "0", "where": "sidebar", "current": str(kept.pk)})
    assert answer.status_code == 200
    assert "Archived chat" not in answer.content.decode()
    assert Session.objects.get(pk=gone.pk).archived_at is None
    assert "Archived chat" in owner_client.get(reverse("chat:session_list")).content.decode()


def test_the_sidebar_lists_branches_under_their_parent_and_escapes_titles(user, owner_client):
    parent = session_create(owner=user, model=MODEL_NAME, context_size=2048, title="<b>Parent</b>")
    at = message_create(session=parent, role="user", content="hi")
    session_create(owner=user, model=MODEL_NAME, context_size=2048, title="Newer one")
    branch = session_branch(session=parent, at_message=at)
    page = owner_client.get(reverse("chat:chat", args=[branch.pk])).content.decode()
    sidebar = page[page.index('id="sidebar"') : page.index("</aside>")]
    assert "<b>Parent</b>" not in sidebar
    assert "&lt;b&gt;Parent&lt;/b&gt;" in sidebar
    # Most recently active first (the branch is newest, but stands under its parent), branches indented.
    newer, parent_at, branch_at = (
        sidebar.index(t) for t in ("Newer one", "Parent&lt;/b&gt;</a>", "(branch at message 1)")
    )
    assert newer < parent_at < branch_at
    assert 'depth-1 current"' in sidebar


def test_new_chat_starts_with_the_accounts_defaults(user, owner_client, app_gateway):
    page = owner_client.get(reverse("chat:account"))
    assert page.status_code == 200
    assert "Custom instructions" in page.content.decode()
    saved = owner_client.post(
        reverse("chat:account"),
        {"model": MODEL_NAME, "context_size": "8192", "system_prompt": "Answer in French."},
    )
    assert saved.status_code == 200
    assert "Saved." in saved.content.decode()
    refused = owner_client.post(reverse("chat:account"), {"model": "", "context_size": "1234", "system_prompt": ""})
    assert refused.status_code == 422
    defaults = ChatDefaults.objects.get(owner=user)
    assert (defaults.model, defaults.context_size, defaults.system_prompt) == (MODEL_NAME, 8192, "Answer in French.")

    answer = owner_client.post(reverse("chat:session_new_chat"))
    assert answer.status_code == 302
    session = Session.objects.get(owner=user)
    assert answer["Location"] == reverse("chat:chat", args=[session.pk])
    assert (session.model, session.context_size, session.system_prompt) == (MODEL_NAME, 8192, "Answer in French.")
    assert session.title == "New conversation"
    assert session.title_pending
    # The sessions list's form starts from the same defaults.
    listing = owner_client.get(reverse("chat:session_list")).content.decode()
    assert "Answer in French." in listing
    assert owner_client.get(reverse("chat:session_new_chat")).status_code == 405


def test_the_new_pages_ask_for_a_login(client):
    for name in ("chat:account", "chat:sidebar"):
        answer = client.get(reverse(name))
        assert answer.status_code == 302
        assert "/accounts/login/" in answer["Location"]
    assert client.post(reverse("chat:session_new_chat")).status_code == 302
