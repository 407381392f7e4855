"""How a client's resent history is split and matched (engine.core.client_history)."""

from __future__ import annotations

import pytest

from engine.core.client_history import (
    ClientHistoryError,
    ClientMessage,
    ClientToolCall,
    HistoryEntry,
    client_request,
    context_size_for,
    history_digest,
    history_entries,
    shared_length,
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
        (conversation(("assistant", "Hello")), "must be the user's"),
        (conversation(("user", "Hi"), ("assistant", "Hello"), ("system", "Be brief.")), "must be the user's"),
        (conversation(("user", " "), ("assistant", "Hello")), "replied to is empty"),
        (conversation(("user", "   ")), "empty"),
        (conversation(("function", "42"), ("user", "Hi")), "'function'"),
        (conversation(("user", "Hi"), ("tool", "42")), "the last message is the tool's"),
    ],
)
def test_a_request_that_is_no_conversation_is_refused_with_why(messages, says):
    with pytest.raises(ClientHistoryError, match=says):
        client_request(messages)


def test_a_request_ending_with_the_assistants_reply_continues_it():
    request = client_request(
        conversation(("system", "S"), ("user", "Hi"), ("assistant", "Hello"), ("user", "Tell"), ("assistant", "Once"))
    )
    assert (request.new_message, request.continues) == ("Tell", "Once")
    held = client_request(conversation(("system", "S"), ("user", "Hi"), ("assistant", "Hello"), ("user", "Tell")))
    # The session found is the one whose client got "Once" as its reply to "Tell".
    assert request.earlier_digest == request.pending_digest == held.digest_with_reply("Once")
    assert request.stopped_reply() == (held, "Once")


def test_the_reply_a_client_holds_last_is_found_with_the_request_that_got_it():
    request = client_request(conversation(("user", "Hi"), ("assistant", "Hel"), ("user", "More")))
    stopped = request.stopped_reply()
    assert stopped is not None
    before, held = stopped
    assert (before.earlier, before.new_message, held) == ((), "Hi", "Hel")
    assert client_request(conversation(("user", "Hi"))).stopped_reply() is None


def test_tool_calls_are_stored_as_the_session_file_keeps_them_and_count_in_the_digest():
    call = ClientToolCall("call_1", "get_time", '{"zone": "UTC"}')
    history = [
        ClientMessage("user", "What time is it?"),
        ClientMessage("assistant", "", (call, ClientToolCall("call_2", "get_date", {}))),
        ClientMessage("tool", "12:00", tool_call_id="call_1"),
        ClientMessage("assistant", "It is noon."),
    ]
    assert history_entries(history) == [
        HistoryEntry("user", "What time is it?"),
        HistoryEntry("tool", "12:00", "call_1", "get_time", {"zone": "UTC"}),
        HistoryEntry("tool", "", "call_2", "get_date", {}),  # called, never answered
        HistoryEntry("assistant", "It is noon."),
    ]
    # Ollama's clients name the tool a result is of instead of the call's id.
    by_name = [
        ClientMessage("assistant", "", (ClientToolCall("", "get_time", {}),)),
        ClientMessage("tool", "12:00", tool_name="get_time"),
    ]
    assert history_entries(by_name) == [HistoryEntry("tool", "12:00", "", "get_time", {})]
    other_call = [
        history[0],
        ClientMessage("assistant", "", (ClientToolCall("call_1", "get_time", "{}"),)),
        *history[2:],
    ]
    assert history_digest("", history) != history_digest("", other_call)
    plain = [ClientMessage("user", "Hi")]
    assert history_digest("", plain) == history_digest("", [ClientMessage("user", "Hi", ())])


def test_a_result_that_names_no_call_answers_the_earliest_open_one_and_bad_json_arguments_stay_text():
    history = [
        ClientMessage("assistant", "", (ClientToolCall("a", "first", "{not json"), ClientToolCall("b", "second", {}))),
        ClientMessage("tool", "one"),
        ClientMessage("tool", "two"),
    ]
    assert history_entries(history) == [
        HistoryEntry("tool", "one", "a", "first", "{not json"),
        HistoryEntry("tool", "two", "b", "second", {}),
    ]


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


@pytest.mark.parametrize(
    ("sent", "shared"),
    [
        ([("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")], 3),  # all of it: a continuation
        ([("user", " Hi\n"), ("assistant", "Hello"), ("user", "Why?")], 2),  # an edit: whitespace does not count
        ([("user", "Hi"), ("user", "Hello")], 1),  # the same text in another role is another message
        ([("user", "Hello"), ("assistant", "Hello")], 0),
        ([("user", "Hi")], 1),  # a regenerate: shorter than what was stored
        ([], 0),
    ],
)
def test_shared_length_counts_the_leading_messages_two_histories_have_in_common(sent, shared):
    stored = [("user", "Hi"), ("assistant", "Hello"), ("user", "Bye"), ("assistant", "Ciao")]
    assert shared_length(stored, sent) == shared


def test_tool_results_after_the_assistants_tool_calls_are_what_a_request_adds():
    call = ClientToolCall("call_1", "get_time", {"zone": "UTC"})
    asked = client_request([ClientMessage("system", "S"), ClientMessage("user", "Time?")])
    # The reply was the call alone; the client sends it back with its result (OpenAI: arguments as JSON text).
    resent = ClientMessage("assistant", "", (ClientToolCall("call_1", "get_time", '{"zone":"UTC"}'),))
    result = ClientMessage("tool", "12:00", tool_call_id="call_1")
    request = client_request([ClientMessage("system", "S"), ClientMessage("user", "Time?"), resent, result])
    assert (request.earlier, request.new_message, request.tool_results) == (
        (ClientMessage("user", "Time?"), resent),
        "",
        (result,),
    )
    assert request.added == (result,)
    assert request.earlier_digest == asked.digest_with_reply("", [call])
    # Ollama's clients send the arguments as an object and no id: the same history.
    by_name = ClientMessage("assistant", "", (ClientToolCall("", "get_time", {"zone": "UTC"}),))
    assert history_digest("S", [ClientMessage("user", "Time?"), by_name]) == request.earlier_digest
    assert request.pending_digest == history_digest("S", [*request.earlier, result])
    assert request.stopped_reply() is None
    assert request.title == "Time?"
    answered = client_request(
        [
            ClientMessage("system", "S"),
            *request.earlier,
            result,
            ClientMessage("assistant", "Noon."),
            ClientMessage("user", "Thanks"),
        ]
    )
    assert answered.earlier_digest == request.digest_with_reply("Noon.")
    # A reply that called tools is not one to continue, nor a stopped one.
    after_call = client_request([ClientMessage("user", "Time?"), resent, ClientMessage("user", "Never mind.")])
    assert after_call.stopped_reply() is None
    with pytest.raises(ClientHistoryError, match="the last message is the tool's"):
        client_request([ClientMessage("user", "Hi"), ClientMessage("assistant", "Hello"), ClientMessage("tool", "1")])
