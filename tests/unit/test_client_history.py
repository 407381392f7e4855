"""How a client's resent history is split and matched (contextmgr.core.client_history)."""

from __future__ import annotations

import pytest

from contextmgr.core.client_history import (
    ClientHistoryError,
    ClientMessage,
    client_request,
    context_size_for,
    history_digest,
)

SIZES = [(2048, 1700), (4096, 3400), (8192, 6800)]


def conversation(*pairs: tuple[str, str]) -> list[ClientMessage]:
    return [ClientMessage(role, content) for role, content in pairs]


def test_the_last_user_message_is_the_new_one_and_system_messages_make_the_system_prompt():
    request = client_request(
        conversation(
            ("system", "Be brief."),
            ("user", "Hi"),
            ("assistant", "Hello!"),
            ("system", "Use metric units."),
            ("user", "How tall is Everest?"),
        )
    )
    assert request.system_prompt == "Be brief.\n\nUse metric units."
    assert request.earlier == tuple(conversation(("user", "Hi"), ("assistant", "Hello!")))
    assert request.new_message == "How tall is Everest?"


def test_the_next_request_resending_the_reply_has_the_digest_the_session_remembered():
    first = client_request(conversation(("system", "S"), ("user", "Hi")))
    remembered = first.digest_with_reply("Hello!")
    second = client_request(conversation(("system", "S"), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Next")))
    assert second.earlier_digest == remembered


def test_whitespace_around_a_message_does_not_count_but_an_edit_or_the_order_does():
    base = conversation(("user", "Hi"), ("assistant", "Hello!"))
    assert history_digest("S", base) == history_digest(" S\n", conversation(("user", "Hi\n"), ("assistant", " Hello!")))
    assert history_digest("S", base) != history_digest("S", conversation(("user", "Hi"), ("assistant", "Hello")))
    assert history_digest("S", base) != history_digest("S", conversation(("assistant", "Hello!"), ("user", "Hi")))
    assert history_digest("S", base) != history_digest("T", base)
    assert history_digest("S", base) != history_digest("S", base[:1])


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ([], "messages is empty"),
        (conversation(("user", "Hi"), ("assistant", "Hello")), "must be the user's"),
        (conversation(("user", "   ")), "empty"),
        (conversation(("tool", "42"), ("user", "Hi")), "'tool'"),
    ],
)
def test_a_request_that_is_no_conversation_is_refused_with_why(messages, says):
    with pytest.raises(ClientHistoryError, match=says):
        client_request(messages)


def test_the_title_is_the_start_of_the_first_user_message_on_one_line():
    assert client_request(conversation(("user", "Plan\n  a  trip"))).title == "Plan a trip"
    long = client_request(conversation(("user", "word " * 40), ("assistant", "ok"), ("user", "more")))
    assert len(long.title) == 60
    assert long.title.endswith("…")
    assert long.title.startswith("word word")


def test_the_context_size_never_sends_more_than_the_client_allowed():
    assert context_size_for(None, SIZES, 4096) == 4096
    assert context_size_for(2048, SIZES, 4096) == 2048
    assert context_size_for(3400, SIZES, 4096) == 4096
    assert context_size_for(100_000, SIZES, 4096) == 8192
    assert context_size_for(512, SIZES, 4096) == 2048


def test_a_request_repeated_after_it_went_unanswered_has_the_pending_digest_it_left():
    request = client_request(conversation(("system", "S"), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Next")))
    repeated = client_request(conversation(("system", "S"), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Next")))
    assert repeated.pending_digest == request.pending_digest
    assert request.pending_digest not in (request.earlier_digest, request.digest_with_reply(""))
    other = client_request(conversation(("system", "S"), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Other")))
    assert other.pending_digest != request.pending_digest
