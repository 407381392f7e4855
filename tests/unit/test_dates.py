from datetime import date

import pytest

from engine.core.dates import date_text, resolve_relative_dates

THURSDAY = date(2023, 5, 25)


@pytest.mark.parametrize(
    ("said", "meant"),
    [
        ("We adopted him last Saturday!", "We adopted him last Saturday (20 May 2023)!"),
        ("this past Monday was rough", "this past Monday (22 May 2023) was rough"),
        ("Yesterday was rough", "Yesterday (24 May 2023) was rough"),
        ("today", "today (25 May 2023)"),
        ("tonight we eat out", "tonight (25 May 2023) we eat out"),
        ("tomorrow", "tomorrow (26 May 2023)"),
        ("the day before yesterday", "the day before yesterday (23 May 2023)"),
        ("the day after tomorrow", "the day after tomorrow (27 May 2023)"),
        ("I start next Friday", "I start next Friday (26 May 2023)"),
        ("see you on Monday", "see you on Monday (29 May 2023)"),
        ("this Thursday", "this Thursday (25 May 2023)"),
        ("two weeks ago I moved", "two weeks ago (11 May 2023) I moved"),
        ("3 days ago", "3 days ago (22 May 2023)"),
        ("A couple of months ago", "A couple of months ago (25 March 2023)"),
        ("a year ago", "a year ago (25 May 2022)"),
        ("in 3 days we fly", "in 3 days (28 May 2023) we fly"),
        ("in a week", "in a week (1 June 2023)"),
        ("last month was busy", "last month (April 2023) was busy"),
        ("next year", "next year (2024)"),
        ("last weekend we hiked", "last weekend (the weekend of 20 May 2023) we hiked"),
        ("this weekend", "this weekend (the weekend of 27 May 2023)"),
        ("next weekend", "next weekend (the weekend of 3 June 2023)"),
        ("next week", "next week (the week of 29 May 2023)"),
        ("Nan had a fall on Wednesday.", "Nan had a fall on Wednesday (24 May 2023)."),
        ("Saturday was great, we hiked", "Saturday (20 May 2023) was great, we hiked"),
        ("We'll meet on Wednesday, I decided", "We'll meet on Wednesday (31 May 2023), I decided"),
        ("I fly home on the 4th of August.", "I fly home on the 4th of August (4 August 2023)."),
        ("It was December 28th. Cold!", "It was December 28th (28 December 2022). Cold!"),
        ("on 31st of February, and on March 3, 2024", "on 31st of February, and on March 3, 2024"),
        ("last week", "last week (the week of 15 May 2023)"),
        ("last year's numbers were low", "last year's (2022) numbers were low"),
        ("the crew comes on June 17 and 18.", "the crew comes on June 17 and 18 (17 June 2023)."),
        ("a send-off on Saturday the 24th", "a send-off on Saturday the 24th (24 June 2023)"),
        ("it was Friday the 12th, as it happens", "it was Friday the 12th (12 May 2023), as it happens"),
        ("the crew comes on June 17 and 18:00 is late", "the crew comes on June 17 (17 June 2023) and 18:00 is late"),
    ],
)
def test_a_relative_date_keeps_its_words_and_gains_the_date_it_means(said, meant):
    assert resolve_relative_dates(said, THURSDAY) == meant


@pytest.mark.parametrize(
    "text",
    [
        "Peak demand is Tuesday and Thursday mornings.",
        "Friday afternoons are nearly empty.",
        "Lectures meet Monday, Wednesday and Friday at 09:05.",
        "No student should have more than two exams in one day.",
        "We did it all in a day.",
        "There hasn't been a bicycle on Quay Road in ten years.",
        "We finished the whole puzzle in three days.",
        "Monday the 45th",  # no month has one
    ],
)
def test_a_day_of_every_week_and_a_length_of_time_gain_no_date(text):
    assert resolve_relative_dates(text, THURSDAY) == text


def test_text_without_a_relative_date_is_unchanged():
    text = "Saturdays are for the market; the week was long and months fly."
    assert resolve_relative_dates(text, THURSDAY) == text


def test_dates_are_written_day_month_year():
    assert date_text(date(2024, 1, 5)) == "5 January 2024"
