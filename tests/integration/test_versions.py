"""A message's versions (a regenerated reply, an edited message): which one is in the context, what the
chat page shows of them, and choosing one from the page and the API."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.test import Client, override_settings
from django.urls import reverse

from chat.models import Checkpoint, Message, Session
from chat.selectors.sessions import session_version_layout
from chat.services.files import session_archive, session_archive_import
from chat.services.messages import message_create
from chat.services.revisions import message_edit, message_version_choose, messages_supersede
from chat.services.sessions import session_branch, session_create
from chat.services.turn import TurnContinue, TurnRegenerate, TurnSend, turn_take
from tests.factories import GREEDY_REPLIES, frames_until, prompt, socket

pytestmark = pytest.mark.django_db
JSON = "application/json"


def say(session: Session, role: str, content: str, *, version_of: Message | None = None) -> Message:
    return message_create(
        session=session,
        role=role,
        content=content,
        version_of_id=None if version_of is None else version_of.version_of_id or version_of.pk,
    )


def regenerated(session: Session, reply: Message, content: str) -> Message:
    """What a regeneration stores: the reply leaves the context, a new one takes its place."""
    messages_supersede(message=reply)
    return say(session, "assistant", content, version_of=reply)


def sent(session: Session) -> list[str]:
    """The texts of the messages the next prompt holds."""
    return [content for role, content in prompt(Session.objects.get(pk=session.pk)) if role != "system"]


@pytest.fixture
def regenerated_reply(chat_session):
    """A question whose reply was regenerated once: (question, first reply, second reply)."""
    question = say(chat_session, "user", "Which port?")
    first = say(chat_session, "assistant", "Port 8000.")
    second = regenerated(chat_session, first, "Port 9000.")
    return question, first, second


def test_the_chosen_reply_is_the_one_the_next_prompt_holds(chat_session, regenerated_reply):
    _, first, second = regenerated_reply
    assert sent(chat_session) == ["Which port?", "Port 9000."]
    before = Session.objects.get(pk=chat_session.pk).context_version

    version = message_version_choose(session=chat_session, message=first)

    assert version == before + 1 == Session.objects.get(pk=chat_session.pk).context_version
    assert sent(chat_session) == ["Which port?", "Port 8000."]
    layout = session_version_layout(session=chat_session)
    assert layout.hidden == {second.pk}
    switch = layout.switches[first.pk]
    assert (switch.number, switch.count, switch.previous_id, switch.next_id) == (1, 2, None, second.pk)

    message_version_choose(session=chat_session, message=second)
    assert sent(chat_session) == ["Which port?", "Port 9000."]
    assert session_version_layout(session=chat_session).hidden == {first.pk}


def test_choosing_the_version_in_the_context_changes_nothing(chat_session, regenerated_reply):
    _, _, second = regenerated_reply
    before = Session.objects.get(pk=chat_session.pk).context_version
    assert message_version_choose(session=chat_session, message=second) == before
    assert Session.objects.get(pk=chat_session.pk).context_version == before


def test_an_edited_message_comes_back_with_what_followed_it_then_and_since(chat_session):
    say(chat_session, "user", "Hello")
    say(chat_session, "assistant", "Hi.")
    original = say(chat_session, "user", "Use Postgres?")
    say(chat_session, "assistant", "Yes, Postgres.")
    edited = message_edit(message=original, content="Use SQLite?")
    assert edited.version_of_id == original.pk
    say(chat_session, "assistant", "Yes, SQLite.")
    assert sent(chat_session) == ["Hello", "Hi.", "Use SQLite?", "Yes, SQLite."]

    message_version_choose(session=chat_session, message=original)
    assert sent(chat_session) == ["Hello", "Hi.", "Use Postgres?", "Yes, Postgres."]
    # The conversation goes on from the first version; what it adds follows that version from now on.
    say(chat_session, "user", "And the port?")
    say(chat_session, "assistant", "5432.")

    message_version_choose(session=chat_session, message=edited)
    assert sent(chat_session) == ["Hello", "Hi.", "Use SQLite?", "Yes, SQLite."]
    hidden = set(
        Message.objects.filter(pk__in=session_version_layout(session=chat_session).hidden).values_list(
            "content", flat=True
        )
    )
    assert hidden == {"Use Postgres?", "Yes, Postgres.", "And the port?", "5432."}

    message_version_choose(session=chat_session, message=original)
    assert sent(chat_session) == ["Hello", "Hi.", "Use Postgres?", "Yes, Postgres.", "And the port?", "5432."]


def test_a_version_chosen_inside_a_tail_comes_back_with_it(chat_session):
    original = say(chat_session, "user", "Name a colour.")
    red = say(chat_session, "assistant", "Red.")
    blue = regenerated(chat_session, red, "Blue.")
    message_version_choose(session=chat_session, message=red)
    edited = message_edit(message=original, content="Name a fruit.")
    say(chat_session, "assistant", "Apple.")

    # Blue is in no context now: it is reached by switching the question back first.
    with pytest.raises(ValidationError, match="choose the version of the earlier message"):
        message_version_choose(session=chat_session, message=blue)
    layout = session_version_layout(session=chat_session)
    assert {original.pk, red.pk, blue.pk} <= layout.hidden
    assert layout.switches[edited.pk].number == 2

    message_version_choose(session=chat_session, message=original)
    assert sent(chat_session) == ["Name a colour.", "Red."]
    layout = session_version_layout(session=chat_session)
    assert layout.switches[red.pk].count == 2
    assert blue.pk in layout.hidden


def test_a_compressed_version_cannot_be_switched(chat_session, regenerated_reply):
    question, first, second = regenerated_reply
    checkpoint = Checkpoint.objects.create(
        session=chat_session,
        number=1,
        level=3,
        first_position=1,
        last_position=second.position,
        summary="s",
        original_tokens=9,
        current_tokens=3,
    )
    Message.objects.filter(pk__in=[question.pk, second.pk]).update(compressed_into=checkpoint)
    before = Session.objects.get(pk=chat_session.pk).context_version

    with pytest.raises(ValidationError, match="older than the last compression"):
        message_version_choose(session=chat_session, message=first)

    assert Session.objects.get(pk=chat_session.pk).context_version == before
    assert list(
        Message.objects.filter(session=chat_session, excluded_from_context=False).values_list("pk", flat=True)
    ) == [question.pk, second.pk]


def test_the_page_shows_the_chosen_version_with_its_switcher(owner_client, chat_session, regenerated_reply):
    _, first, second = regenerated_reply
    page = owner_client.get(reverse("chat:chat", args=[chat_session.pk])).content.decode()
    assert "Port 9000." in page
    assert "Port 8000." not in page
    assert 'data-versions="2/2"' in page
    assert 'aria-label="Previous version (1 of 2)"' in page

    response = owner_client.post(
        reverse("chat:message_version", args=[chat_session.pk, first.pk]), headers={"HX-Request": "true"}
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "Port 8000." in html
    assert "Port 9000." not in html
    assert 'data-versions="1/2"' in html
    assert f"/messages/{second.pk}/version/" in html
    assert 'id="context-meter"' in html  # the meter follows the context
    assert html.count('data-action="regenerate"') == 1, "the version gone back to is the latest reply"
    assert sent(chat_session) == ["Which port?", "Port 8000."]
    # The full history keeps every version.
    full = owner_client.get(reverse("chat:session_full_history", args=[chat_session.pk])).content.decode()
    assert "Port 8000." in full
    assert "Port 9000." in full


def test_a_refused_choice_says_why_in_place_of_the_history(owner_client, chat_session, regenerated_reply):
    _, first, second = regenerated_reply
    checkpoint = Checkpoint.objects.create(
        session=chat_session, number=1, level=3, first_position=1, last_position=3, summary="s",
        original_tokens=9, current_tokens=3,
    )  # fmt: skip
    Message.objects.filter(pk=second.pk).update(compressed_into=checkpoint)
    response = owner_client.post(
        reverse("chat:message_version", args=[chat_session.pk, first.pk]), headers={"HX-Request": "true"}
    )
    assert 'id="version-error"' in response.content.decode()
    assert "older than the last compression" in response.content.decode()
    assert sent(chat_session) == ["Which port?"]  # the compressed reply stands for itself in no block here


def test_only_the_owner_may_choose_and_only_with_the_csrf_token(
    owner_client, other_user, chat_session, regenerated_reply, user
):
    _, first, _ = regenerated_reply
    url = reverse("chat:message_version", args=[chat_session.pk, first.pk])
    bob = Client()
    bob.force_login(other_user)
    assert bob.post(url).status_code == 404
    checked = Client(enforce_csrf_checks=True)
    checked.force_login(user)
    assert checked.post(url).status_code == 403
    assert owner_client.get(url).status_code == 405
    other = session_create(owner=user, model="llama3.2:3b", context_size=16384)
    assert owner_client.post(reverse("chat:message_version", args=[other.pk, first.pk])).status_code == 404
    assert sent(chat_session) == ["Which port?", "Port 9000."]


def test_the_api_lists_a_messages_versions_and_chooses_one(api, bob_api, chat_session, regenerated_reply):
    _, first, second = regenerated_reply
    base = f"/api/sessions/{chat_session.pk}/messages"
    listed = api.get(f"{base}/{first.pk}/versions").json()
    assert [(v["id"], v["version_of"], v["in_active_context"]) for v in listed] == [
        (first.pk, None, False),
        (second.pk, first.pk, True),
    ]

    chosen = api.post(f"{base}/{first.pk}/versions/choose")

    assert chosen.status_code == 200
    assert [(v["id"], v["in_active_context"]) for v in chosen.json()] == [(first.pk, True), (second.pk, False)]
    assert sent(chat_session) == ["Which port?", "Port 8000."]
    assert bob_api.get(f"{base}/{first.pk}/versions").status_code == 404
    assert bob_api.post(f"{base}/{second.pk}/versions/choose").status_code == 404
    assert api.get(f"{base}/999999/versions").status_code == 404
    assert sent(chat_session) == ["Which port?", "Port 8000."]


def test_the_api_refuses_a_compressed_version_with_422(api, chat_session, regenerated_reply):
    _, first, second = regenerated_reply
    checkpoint = Checkpoint.objects.create(
        session=chat_session, number=1, level=3, first_position=1, last_position=3, summary="s",
        original_tokens=9, current_tokens=3,
    )  # fmt: skip
    Message.objects.filter(pk=second.pk).update(compressed_into=checkpoint)
    response = api.post(f"/api/sessions/{chat_session.pk}/messages/{first.pk}/versions/choose")
    assert response.status_code == 422
    assert "older than the last compression" in response.content.decode()


@pytest.mark.django_db(transaction=True)
@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=4)
async def test_a_regenerated_reply_is_a_version_of_the_first(small_session, embedded_gateway):
    first = await turn_take(session_id=small_session.pk, variant=TurnSend("Say hi."), gateway=embedded_gateway)
    second = await turn_take(session_id=small_session.pk, variant=TurnRegenerate(), gateway=embedded_gateway)
    third = await turn_take(session_id=small_session.pk, variant=TurnRegenerate(), gateway=embedded_gateway)
    assert second.assistant_message.version_of_id == first.assistant_message.pk
    assert third.assistant_message.version_of_id == first.assistant_message.pk
    assert second.user_message.pk == first.user_message.pk
    # A version continued stays among its siblings (the text it went on from stays one too).
    continued = await turn_take(session_id=small_session.pk, variant=TurnContinue(), gateway=embedded_gateway)
    assert continued.assistant_message.version_of_id == first.assistant_message.pk
    assert continued.assistant_message.content.startswith(third.assistant_message.content)
    layout = await sync_to_async(session_version_layout)(session=small_session)
    assert layout.switches[continued.assistant_message.pk].count == 4
    # Back on the first reply, it is the latest one: it can be regenerated in turn.
    await sync_to_async(message_version_choose)(session=small_session, message=first.assistant_message)
    fifth = await turn_take(session_id=small_session.pk, variant=TurnRegenerate(), gateway=embedded_gateway)
    assert fifth.assistant_message.version_of_id == first.assistant_message.pk
    assert fifth.user_message.pk == first.user_message.pk
    layout = await sync_to_async(session_version_layout)(session=small_session)
    assert layout.switches[fifth.assistant_message.pk].number == 5
    assert first.assistant_message.pk in layout.hidden


def test_an_archive_keeps_the_versions_and_the_choice(chat_session, regenerated_reply, other_user):
    _, first, second = regenerated_reply
    message_version_choose(session=chat_session, message=first)
    archive = session_archive(session=chat_session)
    assert [m.get("version_of") for m in archive["messages"]] == [None, None, first.position]
    assert "version_of" not in archive["messages"][0], "written only where there is one: older archives round-trip"

    copy = session_archive_import(owner=other_user, data=json.loads(json.dumps(archive)))

    rows = {m.position: m for m in Message.objects.filter(session=copy)}
    assert rows[second.position].version_of_id == rows[first.position].pk
    assert sent(copy) == ["Which port?", "Port 8000."]
    layout = session_version_layout(session=copy)
    assert layout.hidden == {rows[second.position].pk}
    assert layout.switches[rows[first.position].pk].next_id == rows[second.position].pk
    assert session_archive(session=copy)["messages"] == archive["messages"]
    message_version_choose(session=copy, message=rows[second.position])
    assert sent(copy) == ["Which port?", "Port 9000."]


@pytest.mark.django_db(transaction=True)
async def test_the_sessions_other_pages_show_the_chosen_version(owner_client, user, chat_session, regenerated_reply):
    _, first, _ = regenerated_reply
    communicator = await socket(chat_session.pk, user)
    assert (await communicator.connect())[0]
    url = reverse("chat:message_version", args=[chat_session.pk, first.pk])

    response = await sync_to_async(owner_client.post)(url, headers={"HX-Request": "true"})

    assert response.status_code == 200
    frames = await frames_until(communicator, 'data-versions="1/2"')
    assert "Port 8000." in frames[-1]
    assert "Port 9000." not in frames[-1]
    await communicator.disconnect()


def test_a_branch_keeps_the_versions_of_what_it_shares(chat_session, regenerated_reply):
    _, first, second = regenerated_reply
    say(chat_session, "user", "And the host?")
    branch = session_branch(session=chat_session, at_message=Message.objects.get(pk=second.pk))
    copies = {m.position: m for m in Message.objects.filter(session=branch)}
    assert copies[second.position].version_of_id == copies[first.position].pk
    assert copies[first.position].version_of_id is None
    message_version_choose(session=branch, message=copies[first.position])
    assert sent(branch) == ["Which port?", "Port 8000."]
    assert sent(chat_session) == ["Which port?", "Port 9000.", "And the host?"]
