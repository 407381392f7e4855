"""Relative dates made absolute, against the day a message was written.

"Last Saturday" in a message of Thursday 25 May 2023 means 20 May 2023; once the message has
left the context, nothing else in the prompt says when "last Saturday" was. The phrases people use
are found here ("yesterday", "last Saturday", "two weeks ago", "next month"); the calendar
arithmetic is dateutil's ``relativedelta``. Each phrase keeps its words and gains the date it
means in brackets, so a fact reads "we adopted Biscuit last Saturday (20 May 2023)".
"""

from __future__ import annotations

import re
from datetime import date

from dateutil.relativedelta import FR, MO, SA, SU, TH, TU, WE, relativedelta, weekday

_WEEKDAYS: dict[str, weekday] = {
    "monday": MO, "tuesday": TU, "wednesday": WE, "thursday": TH, "friday": FR, "saturday": SA, "sunday": SU,
}  # fmt: skip
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3,
}  # fmt: skip
_SPANS = {
    "day": lambda n: relativedelta(days=n),
    "week": lambda n: relativedelta(weeks=n),
    "month": lambda n: relativedelta(months=n),
    "year": lambda n: relativedelta(years=n),
}
_DAY = r"(?P<day>yesterday|today|tonight|tomorrow|the day before yesterday|the day after tomorrow)"
_WEEKDAY = (
    r"(?:(?P<which>last|this past|this coming|this|next|on)\s+)?(?P<weekday>" + "|".join(_WEEKDAYS) + r")"
    r"(?:\s+the\s+(?P<wdom>\d{1,2})(?:st|nd|rd|th)\b)?"
)
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")  # fmt: skip
_ORDINAL = r"(?P<{name}>\d{{1,2}})(?:st|nd|rd|th)?"
_DAY_OF_MONTH = (
    r"(?:the\s+)?" + _ORDINAL.format(name="dom") + r"\s+of\s+(?P<month>" + "|".join(_MONTHS) + r")"
    r"|(?P<month2>" + "|".join(_MONTHS) + r")\s+" + _ORDINAL.format(name="dom2") + r"(?!\s*,?\s*\d{4})(?![\d:])"
)
_COUNT = r"(?P<count>\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + r")"
_AGO = _COUNT + r"\s+(?P<unit>day|week|month|year)s?\s+(?P<ago>ago)"
_IN = r"in\s+" + _COUNT.replace("count", "count_in") + r"\s+(?P<unit_in>day|week|month|year)s?"
_PERIOD = r"(?P<side>last|next|this)\s+(?P<period>weekend|week|month|year)"
_PHRASE = re.compile(rf"\b(?:{_DAY}|{_WEEKDAY}|{_AGO}|{_IN}|{_PERIOD}|{_DAY_OF_MONTH})\b", re.IGNORECASE)
# A sentence that tells of the past: "on Wednesday" there is the Wednesday before, not the next one.
_PAST = re.compile(
    r"\b(?:was|were|had|did|went|came|got|fell|broke|took|saw|made|said|told|met|left|found|won|lost|bought|"
    r"sent|gave|ran|drove|flew|ate|spent|heard|felt|began|wrote|sang|swam|rode|caught|threw|(?!(?:excit|tir|"
    r"scar|interest|worri|bor|stress|pleas|relax|need|bl|r|b|f|w|sh)ed\b)[a-z]{2,}ed)\b",
    re.IGNORECASE,
)
_FUTURE = re.compile(r"\b(?:will|won't|'ll|going to|gonna|planning|plan to|is on|it's on|coming up)\b", re.IGNORECASE)
# A sentence in the perfect ("there hasn't been a bike here in ten years"): "in ten years" is how long.
_PERFECT = re.compile(r"\b(?:been|hasn't|haven't|hadn't|has not|have not|had not|first time)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?\n]")
# "Tuesday and Thursday mornings", "Friday afternoons": a day of every week, not one date.
_EVERY_WEEK = re.compile(r"(?:\s+(?:and|or|&)\s+\w+day)?\s+(?:mornings|afternoons|evenings|nights)\b", re.IGNORECASE)
# A sentence naming this many days of the week is a timetable ("Monday, Wednesday and Friday at 09:05").
TIMETABLE_WEEKDAYS = 3
# What belongs to the phrase before its date may follow: "last year's numbers", "June 17 and 18".
_TIED = re.compile(r"['’]s\b|\s+(?:and|&|to|-)\s+\d{1,2}(?:st|nd|rd|th)?\b(?![:.,]?\d)")


def date_text(day: date) -> str:
    """A date as the prompt writes it: "20 May 2023"."""
    return f"{day.day} {day:%B} {day.year}"


def _count(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBERS[" ".join(text.lower().split())]


def _day_word(word: str, said_on: date) -> str:
    offsets = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}
    offsets |= {"the day before yesterday": -2, "the day after tomorrow": 2}
    return date_text(said_on + relativedelta(days=offsets[" ".join(word.lower().split())]))


def _past(sentence: str) -> bool:
    """Whether ``sentence`` tells of something done: a past verb and no word of the future."""
    return bool(_PAST.search(sentence)) and not _FUTURE.search(sentence)


def _weekday(which: str, name: str, said_on: date, sentence: str) -> str:
    day = _WEEKDAYS[name.lower()]
    which = " ".join(which.lower().split())
    if which in ("last", "this past") or (which in ("on", "") and _past(sentence)):
        # The latest such day before the message's own day.
        return date_text(said_on + relativedelta(days=-1, weekday=day(-1)))
    if which == "next":
        # "Next Friday" said on a Monday is that week's Friday: the first after today.
        return date_text(said_on + relativedelta(days=1, weekday=day(+1)))
    # "this Friday", "on Friday", "this coming Friday": the nearest one from today on.
    return date_text(said_on + relativedelta(weekday=day(+1)))


def _weekday_of_month(day: int, name: str, said_on: date) -> str | None:
    """ "Saturday the 24th": the day ``day`` of a month, nearest to ``said_on``, that falls on that weekday;
    None when no month within half a year of it has one."""
    weekday_number = _WEEKDAYS[name.lower()].weekday
    candidates = []
    for months in range(-6, 7):
        month_start = said_on.replace(day=1) + relativedelta(months=months)
        try:
            candidate = month_start.replace(day=day)
        except ValueError:
            continue
        if candidate.weekday() == weekday_number:
            candidates.append(candidate)
    if not candidates:
        return None
    return date_text(min(candidates, key=lambda candidate: abs(candidate - said_on)))


def _period(side: str, period: str, said_on: date) -> str:
    step = {"last": -1, "this": 0, "next": 1}[side.lower()]
    period = period.lower()
    if period == "year":
        return str(said_on.year + step)
    if period == "month":
        month = said_on + relativedelta(months=step)
        return f"{month:%B} {month.year}"
    if period == "weekend":
        if step < 0:
            saturday = said_on + relativedelta(days=-1, weekday=SA(-1))
        else:
            saturday = said_on + relativedelta(weekday=SA(+1), weeks=step)
        return f"the weekend of {date_text(saturday)}"
    monday = said_on + relativedelta(weekday=MO(-1), weeks=step)
    return f"the week of {date_text(monday)}"


def _day_of_month(day: int, month_name: str, said_on: date) -> str | None:
    """A day of a month without its year: the one nearest to ``said_on``; None for a day the month lacks."""
    month = _MONTHS.index(month_name.lower()) + 1
    candidates = []
    for year in (said_on.year - 1, said_on.year, said_on.year + 1):
        try:
            candidates.append(date(year, month, day))
        except ValueError:
            continue
    if not candidates:
        return None
    return date_text(min(candidates, key=lambda candidate: abs(candidate - said_on)))


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence of ``text`` around ``start:end``."""
    before = [m.end() for m in _SENTENCE_END.finditer(text, 0, start)]
    after = _SENTENCE_END.search(text, end)
    return text[before[-1] if before else 0 : after.start() if after else len(text)]


def _meaning(match: re.Match[str], said_on: date, text: str) -> str | None:
    groups = match.groupdict()
    if groups["day"]:
        return _day_word(groups["day"], said_on)
    if groups["weekday"]:
        sentence = _sentence(text, match.start(), match.end())
        if groups["wdom"]:
            return _weekday_of_month(int(groups["wdom"]), groups["weekday"], said_on)
        if _EVERY_WEEK.match(text, match.end()) or _timetable(sentence):
            return None
        return _weekday(groups["which"] or "", groups["weekday"], said_on, sentence)
    if groups["dom"] or groups["dom2"]:
        return _day_of_month(int(groups["dom"] or groups["dom2"]), groups["month"] or groups["month2"], said_on)
    if groups["ago"]:
        return date_text(said_on - _SPANS[groups["unit"].lower()](_count(groups["count"])))
    if groups["unit_in"]:
        if groups["unit_in"].lower() == "day" and _count(groups["count_in"]) == 1:
            return None  # "two exams in one day", "all in a day": how long, not when
        sentence = _sentence(text, match.start(), match.end())
        if _past(sentence) or _PERFECT.search(sentence):
            return None  # "we finished it in two days", "not a bike on the road in ten years": how long
        return date_text(said_on + _SPANS[groups["unit_in"].lower()](_count(groups["count_in"])))
    return _period(groups["side"], groups["period"], said_on)


def _timetable(sentence: str) -> bool:
    named = {name for name in _WEEKDAYS if re.search(rf"\b{name}\b", sentence, re.IGNORECASE)}
    return len(named) >= TIMETABLE_WEEKDAYS


def resolve_relative_dates(text: str, said_on: date) -> str:
    """``text`` with each relative date phrase followed by the date it means, said on ``said_on``:
    "last Saturday" becomes "last Saturday (20 May 2023)". The date goes after what is tied to the
    phrase ("last year's (2022) numbers", "June 17 and 18 (17 June 2023)"), so the words said stay
    together; a day of every week ("Friday afternoons", a timetable's days) and "in one day", or "in
    ten years" in a sentence of the past or the perfect (how long), gain none."""
    parts: list[str] = []
    done = 0
    for match in _PHRASE.finditer(text):
        meaning = _meaning(match, said_on, text)
        if meaning is None:
            continue
        tied = _TIED.match(text, match.end())
        end = tied.end() if tied else match.end()
        parts += [text[done:end], f" ({meaning})"]
        done = end
    return "".join(parts) + text[done:]
