from __future__ import annotations

import pytest

from engine.core.backoff import DEFAULT_RETRY_SECONDS, Backoff, seconds_text


def test_the_default_waits_longer_each_time_then_gives_up():
    backoff = Backoff.parse(DEFAULT_RETRY_SECONDS)
    assert backoff.delays == (10.0, 30.0, 90.0)
    assert backoff.attempts == 4
    assert [backoff.after(attempt) for attempt in range(1, 5)] == [10.0, 30.0, 90.0, None]


def test_a_list_may_have_spaces_fractions_and_a_trailing_comma():
    assert Backoff.parse(" 0.2, 1 ,5,").delays == (0.2, 1.0, 5.0)


def test_a_blank_list_means_no_retry():
    for text in ("", " ", ","):
        backoff = Backoff.parse(text)
        assert backoff.attempts == 1
        assert backoff.after(1) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10,soon", "'soon' is not a number of seconds"),
        ("10,-1", "'-1': a wait before a retry must be a positive number"),
        ("0", "'0': a wait"),
        ("inf", "'inf': a wait"),
        ("nan", "'nan': a wait"),
    ],
)
def test_an_entry_that_is_not_a_positive_number_is_named(text, message):
    with pytest.raises(ValueError, match=message):
        Backoff.parse(text)


def test_attempts_are_numbered_from_one():
    with pytest.raises(ValueError, match="numbered from 1, not 0"):
        Backoff((1.0,)).after(0)


def test_a_wait_reads_without_trailing_zeros():
    assert seconds_text(30.0) == "30 s"
    assert seconds_text(0.2) == "0.2 s"
    assert seconds_text(90) == "90 s"
