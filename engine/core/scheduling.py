"""Who gets a model host's next slot: chat turns first, with a bound on how long background work waits.

A host runs ``slots`` generations at once. A person waits for a chat turn's reply, so turns go
first; a summary, an aging or a merge waits for them, but never longer than ``max_wait``: once
it has waited that long it goes next, and if every slot is still taken it runs beside them
(a model server slows down while it does, rather than a compression starving behind turns).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """A request queued for a host: whether it is background work, and since when (seconds, any clock)."""

    background: bool
    since: float


def overdue(request: Waiting, *, now: float, max_wait: float) -> bool:
    """Background work that has waited its full bound; a turn is never overdue (it goes first anyway)."""
    return request.background and now - request.since >= max_wait


def next_to_run(queue: Sequence[Waiting], *, now: float, max_wait: float) -> int | None:
    """The index in ``queue`` (oldest first) of the request that takes a free slot, or None if it is empty.

    Overdue background work first (the oldest of it), then the oldest turn, then the oldest background work.
    """
    if not queue:
        return None
    overdue_work = [i for i, request in enumerate(queue) if overdue(request, now=now, max_wait=max_wait)]
    turns = [i for i, request in enumerate(queue) if not request.background]
    return (overdue_work or turns or [0])[0]


def wait_left(request: Waiting, *, now: float, max_wait: float) -> float | None:
    """Seconds until background ``request`` may run beside full slots (0 when overdue); None for a turn."""
    if not request.background:
        return None
    return max(0.0, request.since + max_wait - now)
