"""When a compression that failed for want of the model is tried again: after each wait of a short
list, each longer than the last, then no more.

A model that timed out under load is likely busy for a while yet: asking again at once adds to
its queue, while waiting for the next stored message (the only retry there used to be) can leave a
session near its budget for minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_RETRY_SECONDS = "10,30,90"


@dataclass(frozen=True)
class Backoff:
    """The waits before the second, third… attempt, in seconds; empty: a failure is not retried."""

    delays: tuple[float, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Backoff:
        """The waits of a comma list of seconds ("10,30,90"; blank: none). Raises ValueError naming
        an entry that is not a positive number."""
        delays = []
        for entry in (part.strip() for part in text.split(",")):
            if not entry:
                continue
            try:
                seconds = float(entry)
            except ValueError:
                raise ValueError(f"{entry!r} is not a number of seconds (a comma list such as '10,30,90')") from None
            if not 0 < seconds < float("inf"):
                raise ValueError(f"{entry!r}: a wait before a retry must be a positive number of seconds")
            delays.append(seconds)
        return cls(tuple(delays))

    @property
    def attempts(self) -> int:
        """How many attempts there may be: the first and one after each wait."""
        return len(self.delays) + 1

    def after(self, attempt: int) -> float | None:
        """The wait before the attempt that follows attempt number ``attempt`` (from 1) failed;
        None once that was the last."""
        if attempt < 1:
            raise ValueError(f"attempts are numbered from 1, not {attempt}")
        return self.delays[attempt - 1] if attempt <= len(self.delays) else None


def seconds_text(seconds: float) -> str:
    """A wait as a person reads it: "30 s", "0.2 s"."""
    return f"{seconds:g} s"
