from __future__ import annotations

from engine.core.scheduling import Waiting, next_to_run, overdue, wait_left

TURN_AT_5 = Waiting(background=False, since=5.0)
SUMMARY_AT_0 = Waiting(background=True, since=0.0)


def test_an_empty_queue_has_no_next():
    assert next_to_run([], now=10.0, max_wait=15.0) is None


def test_a_turn_goes_before_older_background_work_that_is_not_overdue():
    assert next_to_run([SUMMARY_AT_0, TURN_AT_5], now=10.0, max_wait=15.0) == 1


def test_background_work_that_waited_its_bound_goes_before_turns():
    assert next_to_run([TURN_AT_5, SUMMARY_AT_0], now=15.0, max_wait=15.0) == 1


def test_turns_in_the_order_they_came():
    later_turn = Waiting(background=False, since=7.0)
    assert next_to_run([TURN_AT_5, later_turn], now=8.0, max_wait=15.0) == 0


def test_background_work_runs_when_no_turn_waits():
    later = Waiting(background=True, since=3.0)
    assert next_to_run([SUMMARY_AT_0, later], now=4.0, max_wait=15.0) == 0


def test_only_background_work_can_be_overdue():
    assert overdue(SUMMARY_AT_0, now=15.0, max_wait=15.0)
    assert not overdue(SUMMARY_AT_0, now=14.9, max_wait=15.0)
    assert not overdue(TURN_AT_5, now=500.0, max_wait=15.0)


def test_wait_left_counts_down_to_the_bound():
    assert wait_left(SUMMARY_AT_0, now=10.0, max_wait=15.0) == 5.0
    assert wait_left(SUMMARY_AT_0, now=20.0, max_wait=15.0) == 0.0
    assert wait_left(TURN_AT_5, now=6.0, max_wait=15.0) is None
