"""Issue 47, item 9: a text file attached to a message. Checked (size, binary, kind) with an error that says
what to do and stores nothing; stored as part of the user message's content (a fenced block headed by its
name: counted, compressed and recalled like any message), its name on the message and among the session's
artifacts; sent over the chat socket as the composer's fields."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError

from chat.models import Artifact, Message
from chat.selectors.prompt import session_prompt
from chat.services.attachments import (
    MAX_ATTACHMENT_BYTES,
    Attachment,
    attachment_check,
    attachment_content,
    message_attach,
)
from chat.services.files import session_archive, session_archive_import
from chat.services.messages import message_create
from chat.services.revisions import message_edit
from chat.services.sessions import session_create
from engine.core.tokens import TokenCount
from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from tests.factories import frames_until, socket
from tests.support.model_server import SERVED_MODEL

NOTES = "# Pier notes\n\nThe north pier rests on 12 piles; the load limit is 40 t.\n"


def error(**kwargs: str) -> str:
    with pytest.raises(ValidationError) as caught:
        attachment_check(**kwargs)
    return " ".join(caught.value.messages)


def test_a_text_file_is_read_with_its_own_name():
    assert attachment_check(name="C:\\work\\notes.md", text=NOTES) == Attachment("notes.md", NOTES)
    assert attachment_check(name="docs/Makefile", text="all:\n\ttrue\n").name == "Makefile"


def test_a_file_over_the_limit_is_refused_saying_the_limit():
    text = "x" * (MAX_ATTACHMENT_BYTES + 1)
    said = error(name="big.txt", text=text)
    assert said.startswith("big.txt is 100,001 bytes; an attached file can be at most 100,000 bytes")
    assert "Nothing was sent" in said
    assert attachment_check(name="edge.txt", text="x" * MAX_ATTACHMENT_BYTES).name == "edge.txt"
    # Bytes, not characters: 40,000 three-byte characters are 120,000 bytes.
    assert "120,000 bytes" in error(name="wide.txt", text="€" * 40_000)


def test_binary_data_and_other_kinds_of_file_are_refused():
    assert "is not a text file (it holds binary data)" in error(name="data.txt", text="PK\x03\x04\x00\x00abc")
    assert "is not a text file" in error(name="data.csv", text="a,b\n\ufffd\ufffd\n")
    assert "is not a text file" in error(name="noise.log", text="\x01\x02\x03 hello")
    assert ".png files are not read as text" in error(name="photo.png", text="not really a picture")
    assert "needs a name" in error(name="", text="text")
    assert "needs a name" in error(name="a\x07b.txt", text="text")


def test_the_file_becomes_a_fenced_block_headed_by_its_name():
    content = attachment_content(message="What is the load limit?", attachment=Attachment("notes.md", NOTES))
    assert content == f"What is the load limit?\n\nAttached file: notes.md\n```\n{NOTES}```"
    fenced = attachment_content(message="", attachment=Attachment("a.md", "```py\nx = 1\n```"))
    assert fenced == "Attached file: a.md\n````\n```py\nx = 1\n```\n````"


@pytest.fixture
def attach_session(user, use_gateway, fake_ollama):
    use_gateway(Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=60)))
    fake_ollama.behaviour.canned_reply = "The load limit is 40 t."
    return session_create(owner=user, model=SERVED_MODEL, context_size=4096)


@pytest.mark.django_db(transaction=True)
async def test_a_file_sent_with_a_message_is_stored_counted_and_in_the_prompt(attach_session, user):
    page = await socket(attach_session.pk, user)
    assert (await page.connect())[0]
    frame = {"message": "What is the load limit?", "attachment_name": "notes.md", "attachment_text": NOTES}
    await page.send_to(text_data=json.dumps(frame))
    frames = await frames_until(page, 'id="context-meter"')
    shown = "".join(frames)
    assert "📎 notes.md" in shown, "the message shows the file's chip"
    assert 'id="attachment" class="attachment" hx-swap-oob="true"' in shown, "the composer's attachment is emptied"
    stored = await Message.objects.aget(session=attach_session, role="user")
    assert stored.attachment_name == "notes.md"
    assert stored.content == attachment_content(
        message="What is the load limit?", attachment=Attachment("notes.md", NOTES)
    )
    assert stored.tokens > 20, "the file's text is counted in the budget"
    assert await Artifact.objects.filter(session=attach_session, path="notes.md", action="attached").aexists()
    prompt = await sync_to_async(session_prompt)(session=attach_session)
    text = json.dumps([block.__dict__ for block in prompt.blocks], default=str)
    assert "the load limit is 40 t." in text
    assert "Attached notes.md" in text, "the artifact is in the pinned block"
    await page.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_refused_file_stores_nothing_and_says_why(attach_session, user):
    page = await socket(attach_session.pk, user)
    assert (await page.connect())[0]
    frame = {"message": "Read this.", "attachment_name": "blob.txt", "attachment_text": "ab\x00cd"}
    await page.send_to(text_data=json.dumps(frame))
    frames = await frames_until(page, "is not a text file")
    assert "blob.txt is not a text file (it holds binary data)" in frames[-1]
    assert 'id="composer-text"' not in "".join(frames), "the composer keeps the message"
    assert not await Message.objects.filter(session=attach_session).aexists()
    assert not await Artifact.objects.filter(session=attach_session).aexists()
    await page.disconnect()


def _attached(session) -> Message:
    content = attachment_content(message="What is the load limit?", attachment=Attachment("notes.md", NOTES))
    return message_attach(
        session=session, content=content, attachment=Attachment("notes.md", NOTES), token_count=TokenCount(60, False)
    )


@pytest.mark.django_db
def test_an_edit_keeps_the_file_while_it_holds_its_text(user):
    session = session_create(owner=user, model=SERVED_MODEL, context_size=4096)
    original = _attached(session)
    kept = message_edit(message=original, content=original.content.replace("load limit", "pile count"))
    assert kept.attachment_name == "notes.md", "the edited message still shows the file's chip"
    dropped = message_edit(message=kept, content="What is the pile count?")
    assert dropped.attachment_name == "", "the file's text was edited away: no chip"


@pytest.mark.django_db
def test_an_archive_brings_back_the_attached_file_and_writes_nothing_without_one(user):
    session = session_create(owner=user, model=SERVED_MODEL, context_size=4096)
    _attached(session)
    message_create(session=session, role=Message.Role.ASSISTANT, content="40 t.", token_count=TokenCount(3, False))
    archive = session_archive(session=session)
    assert [m.get("attachment_name") for m in archive["messages"]] == ["notes.md", None]
    copy = session_archive_import(owner=user, data=archive)
    assert list(copy.messages.order_by("position").values_list("attachment_name", flat=True)) == ["notes.md", ""]


@pytest.mark.django_db(transaction=True)
def test_the_rest_api_sends_a_file_with_a_message_and_refuses_a_bad_one_storing_nothing(api):
    created = api.post(
        "/api/sessions", {"model": EMBEDDED_MODEL, "context_size": 4096}, content_type="application/json"
    )
    assert created.status_code == 201, created.content
    url = f"/api/sessions/{created.json()['id']}/messages"
    refused = api.post(
        url,
        {"content": "Read this.", "attachment": {"name": "pier.png", "text": "\x89PNG"}},
        content_type="application/json",
    )
    assert refused.status_code == 422, refused.content
    assert "pier.png: .png files are not read as text" in refused.content.decode()
    assert not Message.objects.filter(session_id=created.json()["id"]).exists()

    answer = api.post(
        url,
        {"content": "What is the load limit?", "attachment": {"name": "docs/notes.md", "text": NOTES}},
        content_type="application/json",
    )
    assert answer.status_code == 200, answer.content
    sent = answer.json()["user_message"]
    assert sent["attachment_name"] == "notes.md"
    assert sent["content"] == attachment_content(
        message="What is the load limit?", attachment=Attachment("notes.md", NOTES)
    )
    assert answer.json()["assistant_message"]["attachment_name"] == ""
