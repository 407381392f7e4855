from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import override_settings

from chat.models import MAX_MESSAGE_CHARS, Message
from chat.selectors.context import session_budget, session_context_line
from chat.services.messages import (
    MessageRefused,
    NewMessage,
    ToolResult,
    message_create,
    message_create_many,
    message_tool_results,
)
from chat.services.sessions import session_create, session_update
from engine.core.tokens import PER_MESSAGE_OVERHEAD, TokenCount
from engine.resources import count_text_tokens

pytestmark = pytest.mark.django_db


def test_session_takes_the_ollama_size_and_counts_its_system_prompt(user):
    session = session_create(owner=user, model="llama3.2:3b", context_size=16384, system_prompt="Be brief.")
    assert session.max_tokens == 13_600
    assert session.tier == 3
    assert session.system_prompt_tokens == count_text_tokens("Be brief.")
    assert session.model_parameter_size_b == 3.0
    assert session.title == "New conversation"
    # 3B model, no compressions: 0.30 x 1.0 x 1.0.
    assert session.reliability_score == pytest.approx(0.30)


def test_the_models_own_context_length_caps_max_tokens(user):
    session = session_create(owner=user, model="embedded/smollm2-135m", context_size=16384, context_limit=8192)
    assert (session.max_tokens, session.tier) == (8192, 3)
    assert session_create(owner=user, model="m", context_size=4096, context_limit=8192).max_tokens == 3400


@override_settings(OLLM_MODEL_CONTEXT_OVERRIDES={"tiny:1b": {16384: 9000}})
def test_per_model_override_sets_max_tokens(user):
    assert session_create(owner=user, model="tiny:1b", context_size=16384).max_tokens == 9000


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"context_size": 5000}, "context_size", "5000 is not offered"),
        ({"model": "  "}, "model", "Choose a model."),
        ({"title": "t" * 201}, "title", "title is 201 characters long; the limit is 200."),
        ({"settings": {"compression": {"strategy": "drop"}}}, "settings", "compression.strategy must be one of"),
        ({"context_size": 2048, "system_prompt": "word " * 2000}, "system_prompt", "the context holds 1,700"),
    ],
)
def test_bad_session_input_is_refused_clearly(user, kwargs, field, message):
    arguments = {"owner": user, "model": "llama3.2:3b", "context_size": 16384, **kwargs}
    with pytest.raises(ValidationError) as raised:
        session_create(**arguments)
    assert message in " ".join(raised.value.message_dict[field])


def test_messages_are_stored_in_order_and_counted_once(chat_session):
    first = message_create(session=chat_session, role="user", content="Hello there")
    second = message_create(session=chat_session, role="assistant", content="Hi! 👋")
    assert (first.position, second.position) == (1, 2)
    assert first.tokens == count_text_tokens("Hello there") + PER_MESSAGE_OVERHEAD
    assert not first.tokens_exact
    budget = session_budget(session=chat_session)
    assert budget.active_tokens == first.tokens + second.tokens
    assert budget.system_prompt_tokens == chat_session.system_prompt_tokens


def test_many_messages_follow_the_history_checked_and_sanitised_as_one_is(chat_session):
    message_create(session=chat_session, role="user", content="Hello there")
    stored = message_create_many(
        session=chat_session,
        messages=[
            NewMessage(role="assistant", content="Hi\x00!", token_count=TokenCount(4, exact=True)),
            NewMessage(role="tool", content="ok", token_count=TokenCount(2, exact=False), tool_name="grep\x00"),
        ],
    )
    assert stored == 2
    rows = list(Message.objects.filter(session=chat_session).order_by("position"))
    assert [(m.position, m.role, m.content) for m in rows] == [
        (1, "user", "Hello there"), (2, "assistant", "Hi\ufffd!"), (3, "tool", "ok")
    ]  # fmt: skip
    assert (rows[1].tokens, rows[1].tokens_exact, rows[2].tool_name) == (4, True, "grep\ufffd")
    assert session_budget(session=chat_session).active_tokens == rows[0].tokens + 4 + 2


def test_many_messages_are_all_stored_or_none(chat_session):
    good = NewMessage(role="assistant", content="fine", token_count=TokenCount(2, exact=False))
    with pytest.raises(MessageRefused) as refused:
        message_create_many(
            session=chat_session,
            messages=[good, NewMessage(role="user", content="  ", token_count=TokenCount(1, exact=False)), good],
        )
    assert refused.value.index == 1
    assert refused.value.messages == ["The message is empty."]
    assert not Message.objects.filter(session=chat_session).exists()


def test_budget_sums_stored_counts_without_recounting(chat_session):
    message = message_create(session=chat_session, role="assistant", content="short")
    # Change the text behind the service's back: a recount would notice.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE chat_message SET content = %s WHERE id = %s", ["much longer text " * 50, message.id])
    assert session_budget(session=chat_session).active_tokens == message.tokens


def test_exact_counts_from_the_backend_are_stored_as_exact(chat_session):
    message = message_create(
        session=chat_session, role="assistant", content="anything", token_count=TokenCount(tokens=7, exact=True)
    )
    assert (message.tokens, message.tokens_exact) == (7, True)


def test_last_activity_moves(chat_session):
    before = chat_session.last_activity
    message_create(session=chat_session, role="user", content="ping")
    chat_session.refresh_from_db()
    assert chat_session.last_activity > before


@pytest.mark.parametrize(
    ("role", "content", "message"),
    [
        ("wizard", "hi", "role must be one of user, assistant, system, tool"),
        ("user", "   ", "The message is empty."),
        ("user", "x" * (MAX_MESSAGE_CHARS + 1), "the limit is 1,000,000"),
    ],
)
def test_bad_messages_are_refused_and_nothing_is_stored(chat_session, role, content, message):
    with pytest.raises(ValidationError, match=message):
        message_create(session=chat_session, role=role, content=content)
    assert Message.objects.filter(session=chat_session).count() == 0


def test_hostile_unicode_is_stored_verbatim_but_nul(chat_session):
    text = "NUL\x00 <script>alert(1)</script> 🧪 <|endoftext|> " + "é" * 10_000
    message = message_create(session=chat_session, role="user", content=text)
    message.refresh_from_db()
    assert message.content == text.replace("\x00", "\ufffd")


def test_context_line_of_a_fresh_session(chat_session):
    message_create(session=chat_session, role="user", content="Hello")
    used = session_budget(session=chat_session).used
    assert session_context_line(session=chat_session) == f"Context: {used:,}/13,600 🔴 30% (0 compressions)"


def test_session_update_changes_size_model_and_prompt_and_recounts(user):

    session = session_create(owner=user, model="llama3.2:3b", context_size=16384)
    updated = session_update(
        session=session,
        title="  Renamed ",
        model="qwen2.5:7b",
        context_size=4096,
        system_prompt="Be brief.",
        summary_model="embedded/smollm2-135m",
    )
    updated.refresh_from_db()
    assert (updated.title, updated.model, updated.context_size, updated.max_tokens) == (
        "Renamed",
        "qwen2.5:7b",
        4096,
        3400,
    )
    assert updated.model_parameter_size_b == 7.0
    assert updated.system_prompt_tokens == count_text_tokens("Be brief.")
    assert (updated.summary_model, updated.summarizer) == ("embedded/smollm2-135m", "embedded/smollm2-135m")
    assert session_update(session=updated, summary_model="").summarizer == "qwen2.5:7b"


def test_session_update_refuses_bad_values_and_changes_nothing(user):

    session = session_create(owner=user, model="llama3.2:3b", context_size=16384)
    with pytest.raises(ValidationError, match="context_size"):
        session_update(session=session, title="New", context_size=12345)
    with pytest.raises(ValidationError, match="the context holds"):
        session_update(session=session, system_prompt="word " * 4000, context_size=2048)
    session.refresh_from_db()
    assert (session.title, session.context_size, session.system_prompt) == ("New conversation", 16384, "")


def test_session_delete_removes_its_history(user):
    from chat.services.sessions import session_delete

    session = session_create(owner=user, model="llama3.2:3b", context_size=16384)
    message_create(session=session, role="user", content="hello")
    session_delete(session=session)
    assert not Message.objects.filter(session_id=session.pk).exists()


def test_tool_results_fill_the_calls_they_answer_and_a_stray_one_is_a_message_of_its_own(chat_session):
    message_create(session=chat_session, role=Message.Role.USER, content="Time and weather?")
    for call_id, name in (("c1", "get_time"), ("c2", "get_weather"), ("c3", "get_date")):
        message_create(
            session=chat_session, role=Message.Role.TOOL, content="", token_count=TokenCount(5, exact=False),
            tool_call_id=call_id, tool_name=name, tool_args={},
        )  # fmt: skip
    results = [
        (ToolResult("rain", tool_name="get_weather"), TokenCount(1, exact=False)),  # Ollama's: by name
        (ToolResult("12:00", tool_call_id="c1"), TokenCount(2, exact=False)),  # OpenAI's: by id
        (ToolResult("Friday"), TokenCount(1, exact=False)),  # names none: the earliest open call
        (ToolResult("stray", tool_call_id="c9"), TokenCount(1, exact=False)),  # answers no call
    ]
    last = message_tool_results(session=chat_session, results=results)
    stored = [(m.role, m.content, m.tool_call_id, m.tool_name, m.tokens) for m in chat_session.messages.all()]
    assert stored == [
        ("user", "Time and weather?", "", "", stored[0][4]),
        ("tool", "12:00", "c1", "get_time", 7),
        ("tool", "rain", "c2", "get_weather", 6),
        ("tool", "Friday", "c3", "get_date", 6),
        ("tool", "stray", "c9", "", 1),
    ]
    assert last.content == "stray"
    versions = [m.context_version for m in chat_session.messages.all()]
    assert len(set(versions[1:])) == 4  # each write raised the context version
