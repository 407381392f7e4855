from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from engine.core.times import iso_millis


def test_one_format_to_the_millisecond_as_the_cli_writes():
    assert iso_millis(datetime(2026, 1, 26, 9, 30, 5, 23000, tzinfo=UTC)) == "2026-01-26T09:30:05.023Z"
    assert iso_millis(datetime(2026, 1, 26, 9, 30, 5, tzinfo=UTC)) == "2026-01-26T09:30:05.000Z", "a whole second too"


def test_finer_digits_are_cut_not_rounded():
    assert iso_millis(datetime(2026, 1, 26, 23, 59, 59, 999999, tzinfo=UTC)) == "2026-01-26T23:59:59.999Z"


def test_other_zones_and_naive_moments_are_written_in_utc():
    plus_two = timezone(timedelta(hours=2))
    assert iso_millis(datetime(2026, 1, 26, 11, 0, tzinfo=plus_two)) == "2026-01-26T09:00:00.000Z"
    assert iso_millis(datetime(2026, 1, 26, 9, 0)) == "2026-01-26T09:00:00.000Z"
