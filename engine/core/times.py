"""Moments as text: one format for every time the app writes out (the REST API, the session file)."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_millis(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ``: UTC, to the millisecond, always with the fraction, as the OLLM CLI
    (JavaScript's ``Date.toISOString``) writes its session files; finer digits are cut, not rounded,
    so a time never moves to the next millisecond. A naive moment is read as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
