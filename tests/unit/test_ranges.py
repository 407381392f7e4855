from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.core.ranges import MessageRange, carried_over, join_ranges, range_from_label


def test_a_range_of_messages_is_shown_as_the_spec_shows_it():
    assert MessageRange(2, 4).label == "Messages 2-4"
    assert MessageRange(7, 7).label == "Message 7", "one message: not 'Messages 7-7'"
    assert MessageRange(3, 3, "Carried over from “X”").label == "Carried over from “X”, then message 3"


def test_a_carried_over_range_shows_where_it_came_from():
    assert carried_over("Plans").label == "Carried over from “Plans”"
    assert MessageRange(2, 9, "Carried over from “Plans”").label == "Carried over from “Plans”, then messages 2-9"


@pytest.mark.parametrize(("first", "last"), [(1, None), (None, 3), (5, 4), (-1, 2)])
def test_a_range_has_both_ends_in_order_or_none(first, last):
    with pytest.raises(ValueError, match="message range"):
        MessageRange(first, last)


def test_joined_ranges_span_from_the_first_message_to_the_last():
    assert join_ranges([MessageRange(2, 4), MessageRange(7, 9), MessageRange(12, 12)]) == MessageRange(2, 12)
    assert join_ranges([MessageRange(2, 4)]) == MessageRange(2, 4)
    assert join_ranges([]) == MessageRange()


def test_a_carried_over_range_joined_with_messages_is_not_garbled():
    """The text ranges of before were joined by splitting them at "-": a carried-over checkpoint
    rolled over with messages 1-12 of "Plan A-B (draft)" became "Carried over from “Plan A-12"."""
    carried = carried_over("Plan A-B (draft)")
    rolled = join_ranges([carried, MessageRange(1, 12)])
    assert rolled == MessageRange(1, 12, "Carried over from “Plan A-B (draft)”")
    assert rolled.label == "Carried over from “Plan A-B (draft)”, then messages 1-12"
    # Merged again later, with checkpoints over messages 14-20 and 22-30: the title stays whole.
    merged = join_ranges([rolled, MessageRange(14, 20), MessageRange(22, 30)])
    assert merged.label == "Carried over from “Plan A-B (draft)”, then messages 1-30"
    # A merge of the carried checkpoint alone with others that hold no messages keeps its origin only.
    assert join_ranges([carried, MessageRange(origin="Carried over from “Other”")]).label == (
        "Carried over from “Plan A-B (draft)”; Carried over from “Other”"
    )
    assert join_ranges([carried, carried]) == carried


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Messages 2-4", MessageRange(2, 4)),
        ("Message 7", MessageRange(7, 7)),
        ("Messages 7-7", MessageRange(7, 7)),
        ("Carried over from “X”, then message 3", MessageRange(3, 3, "Carried over from “X”")),
        ("Carried over from “Plan A-B”", MessageRange(origin="Carried over from “Plan A-B”")),
        ("Carried over from “X”, then messages 3-8", MessageRange(3, 8, "Carried over from “X”")),
        ("Messages 9-2", MessageRange(origin="Messages 9-2")),
        ("block 3", MessageRange(origin="block 3")),
        ("Messages 2-4\n", MessageRange(origin="Messages 2-4\n")),
        ("", MessageRange()),
    ],
)
def test_a_label_from_a_snapshot_reads_back_as_its_range(text, expected):
    assert range_from_label(text) == expected


@given(
    st.one_of(
        st.builds(lambda a, n: MessageRange(a, a + n), st.integers(0, 10**6), st.integers(0, 10**6)),
        st.builds(carried_over, st.text()),
        st.builds(
            lambda a, n, title: MessageRange(a, a + n, carried_over(title).origin),
            st.integers(0, 10**6),
            st.integers(0, 10**6),
            st.text(),
        ),
    )
)
def test_every_label_reads_back_as_the_range_it_shows(message_range):
    assert range_from_label(message_range.label) == message_range
