from __future__ import annotations

import pytest

from engine.core.budget import Budget
from engine.core.selection import (
    ContextMessage,
    RolloverPlan,
    nothing_to_compress_reason,
    plan_rollover,
    preserved_tail_start,
    rollover_due,
    rollover_skip_reason,
    select_for_compression,
    select_for_rollover,
)


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


def test_why_nothing_is_compressed_is_said_in_figures():
    messages = [msg(1, "user", 300), msg(2, "assistant", 166), msg(3, "user", 100)]
    assert not select_for_compression(messages, preserve_recent=400)
    assert nothing_to_compress_reason(messages, preserve_recent=400) == (
        "nothing to compress: of the 566 tokens of messages in the context, 400 are yours or the system's "
        "(never compressed), and the 166 of replies and tool output are within the newest 266 tokens, which "
        "compression keeps (up to 400), or tied to them (a tool call stays with its results)"
    )


def rollover_ids(messages, goal=300, trigger=600):
    return plan_rollover(messages, goal_tokens=goal, trigger_at=trigger).message_ids


def test_a_rollover_takes_assistant_output_first_oldest_first():
    # 5 user messages and 5 replies, 1,000 tokens in all; 300 wanted, trigger at 700.
    messages = [msg(i, "user" if i % 2 else "assistant") for i in range(1, 11)]
    plan = plan_rollover(messages, goal_tokens=300, trigger_at=700)
    # Every reply but the newest message (10) goes, no user message: the conversation stays at 600,
    # under the trigger.
    assert plan.message_ids == (2, 4, 6, 8)
    assert (plan.tokens, plan.kept_tokens, plan.user_messages) == (400, 600, 0)
    assert plan.protected_tokens == 600  # the user messages and the newest message
    assert plan


def test_a_rollover_takes_only_as_much_assistant_output_as_it_needs():
    messages = [msg(1, "user", 50), msg(2, "assistant", 400), msg(3, "user", 50), msg(4, "assistant", 400)]
    plan = plan_rollover(messages, goal_tokens=500, trigger_at=1000)
    assert plan.message_ids == (2,)
    assert plan.kept_tokens == 500


def test_user_messages_leave_only_when_the_never_compressed_part_reaches_the_trigger():
    # User messages alone: 6 x 100 = 600 tokens, at the trigger.
    messages = [msg(i, "user" if i % 2 else "assistant", 100 if i % 2 else 50) for i in range(1, 13)]
    plan = plan_rollover(messages, goal_tokens=300, trigger_at=600)
    # The conversation goes oldest first, whatever the role, until 300 is reached: the newest two
    # exchanges stay whole, replies included.
    assert plan.protected_tokens == 650
    assert plan.message_ids == (1, 2, 3, 4, 5, 6, 7, 8)
    assert plan.user_messages == 4
    assert plan.kept_tokens == 300
    # One token more of trigger and no user message goes.
    assert plan_rollover(messages, goal_tokens=300, trigger_at=651).user_messages == 0


def test_the_newest_message_always_stays():
    assert rollover_ids([msg(1, "user", 5000)], goal=10, trigger=20) == ()
    assert rollover_ids([msg(1, "assistant", 900), msg(2, "assistant", 900)], goal=10, trigger=20) == (1,)
    assert plan_rollover([], goal_tokens=10, trigger_at=20) == RolloverPlan((), 0, 0, 0, 0, 10, 20)


def test_a_rollover_moves_a_tool_call_group_whole():
    messages = [
        msg(1, "user", 50),
        msg(2, "assistant", 50, group="call_1"),
        msg(3, "tool", 300, group="call_1"),
        msg(4, "assistant", 50, group="call_1"),
        msg(5, "user", 50),
        msg(6, "assistant", 100, group="call_2"),
        msg(7, "tool", 100, group="call_2"),
    ]
    # call_1 goes whole; call_2 holds the newest message and stays whole.
    plan = plan_rollover(messages, goal_tokens=350, trigger_at=700)
    assert plan.message_ids == (2, 3, 4)
    assert plan.protected_tokens == 300
    # A group with a user message in it is never-compressed: it moves only as user messages do.
    tied = [msg(1, "assistant", 200, group="g"), msg(2, "user", 200, group="g"), msg(3, "user", 10)]
    assert rollover_ids(tied, goal=50, trigger=500) == ()
    assert rollover_ids(tied, goal=50, trigger=400) == (1, 2)


def budget(active, *, checkpoints=0, max_tokens=1_700, system=100):
    return Budget(
        max_tokens=max_tokens, system_prompt_tokens=system, checkpoint_tokens=checkpoints, active_tokens=active
    )


@pytest.mark.parametrize(
    ("active", "checkpoints", "system", "due"),
    [
        (800, 0, 100, False),  # room for the reply, under the trigger (1,280)
        (1_279, 0, 100, False),
        (1_280, 0, 100, True),  # at the trigger
        (1_000, 400, 100, True),  # the checkpoints lowered the trigger to 960
        # A system prompt that leaves 100 tokens: the trigger is at 80, the reserve's edge at 68.
        (68, 0, 1_600, False),  # 32 tokens left for the reply: exactly the reserve
        (69, 0, 1_600, True),  # 31 tokens left: less than the reserve, under the trigger
    ],
)
def test_a_rollover_is_due_when_the_reply_has_no_reserve_or_the_trigger_is_reached(active, checkpoints, system, due):
    state = budget(active, checkpoints=checkpoints, system=system)
    assert rollover_due(state) is due
    assert state.compression_due is (due and active >= state.trigger_at)


def test_the_reply_reserve_of_the_rollover_predicate_is_the_callers():
    roomy = budget(800)
    assert roomy.free == 800
    assert not rollover_due(roomy, reply_min=800)
    assert rollover_due(roomy, reply_min=801)


def test_a_rollover_is_planned_against_the_trigger_the_ultra_checkpoint_leaves():
    messages = [msg(i, "user" if i % 2 else "assistant") for i in range(1, 11)]
    # Without checkpoints: available 1,600, trigger 1,280; an ultra checkpoint of 400 lowers it to 960.
    # The goal fills the prompt to 60% of the context: 1,020 - 100 (system) - 400 (ultra) = 520 for messages,
    # more than half that trigger (480).
    plan = select_for_rollover(messages, budget(1_000), ultra_tokens=400)
    assert (plan.trigger_at, plan.goal_tokens) == (960, 520)
    assert plan == plan_rollover(messages, goal_tokens=520, trigger_at=960)
    # Every reply but the newest message goes; the user messages are under the trigger and stay.
    assert plan.message_ids == (2, 4, 6, 8)
    assert plan.kept_tokens == 600
    # Checkpoints that already take more than the ultra checkpoint will keep the trigger where it is.
    assert select_for_rollover(messages, budget(1_000, checkpoints=600), ultra_tokens=400).trigger_at == 800
    # A memory that fills 60% alone leaves the messages half the trigger, never less.
    full = select_for_rollover(messages, budget(1_000), ultra_tokens=1_000)
    assert (full.trigger_at, full.goal_tokens) == (480, 240)


def test_a_rollover_with_nothing_to_take_says_why():
    fits = select_for_rollover([msg(1, "user", 300), msg(2, "assistant", 100)], budget(400), ultra_tokens=0)
    assert not fits
    assert rollover_skip_reason(fits, checkpoints=0) == (
        "nothing to roll over: the conversation already fits in half the trigger"
    )
    # Checkpoints to merge are something to do, even with no message to take.
    assert rollover_skip_reason(fits, checkpoints=1) is None

    users = select_for_rollover([msg(1, "user", 500), msg(2, "user", 500)], budget(1_000), ultra_tokens=0)
    assert not users
    assert rollover_skip_reason(users, checkpoints=0) == (
        "nothing to roll over: no assistant output to take, and the user messages (1,000 tokens) "
        "are under the trigger (1,280)"
    )

    newest = select_for_rollover([msg(1, "user", 1_500)], budget(1_500), ultra_tokens=0)
    assert rollover_skip_reason(newest, checkpoints=0) == (
        "nothing to roll over: the newest message alone fills the context"
    )

    takes = select_for_rollover([msg(1, "assistant", 900), msg(2, "user", 500)], budget(1_400), ultra_tokens=0)
    assert takes.message_ids == (1,)
    assert rollover_skip_reason(takes, checkpoints=0) is None
