from __future__ import annotations

from contextmgr.core.selection import ContextMessage, preserved_tail_start, select_for_compression


def msg(id_, role, tokens=100, group=None):
    return ContextMessage(id=id_, role=role, tokens=tokens, group=group)


def test_only_assistant_and_tool_messages_oldest_first():
    messages = [
        msg(1, "system"),
        msg(2, "user"),
        msg(3, "assistant"),
        msg(4, "user"),
        msg(5, "tool"),
        msg(6, "assistant"),
    ]
    selection = select_for_compression(messages, preserve_recent=0)
    assert selection.message_ids == (3, 5, 6)
    assert selection.tokens == 300
    assert selection


def test_the_newest_preserve_recent_tokens_stay():
    messages = [msg(i, "assistant" if i % 2 else "user") for i in range(1, 11)]
    # 250 tokens preserved: messages 9 and 10 (200 tokens) fit, message 8 would not.
    assert preserved_tail_start(messages, 250) == 8
    assert select_for_compression(messages, preserve_recent=250).message_ids == (1, 3, 5, 7)


def test_preserve_recent_exactly_at_a_boundary_keeps_that_message():
    messages = [msg(1, "assistant"), msg(2, "assistant"), msg(3, "assistant")]
    assert select_for_compression(messages, preserve_recent=200).message_ids == (1,)


def test_a_tool_call_and_its_result_are_never_split():
    messages = [
        msg(1, "assistant"),
        msg(2, "assistant", group="call_1"),
        msg(3, "tool", group="call_1"),
        msg(4, "assistant", group="call_2"),
        msg(5, "tool", group="call_2"),
        msg(6, "user"),
    ]
    # The tail (message 6 and the result of call_2) holds call_2 back whole.
    assert select_for_compression(messages, preserve_recent=200).message_ids == (1, 2, 3)


def test_a_group_with_a_user_message_is_not_compressed():
    messages = [msg(1, "assistant", group="g"), msg(2, "user", group="g"), msg(3, "assistant")]
    assert select_for_compression(messages, preserve_recent=0).message_ids == (3,)


def test_nothing_to_compress_is_an_empty_selection():
    selection = select_for_compression([msg(1, "user"), msg(2, "assistant")], preserve_recent=10_000)
    assert selection.message_ids == ()
    assert not selection
