"""What the synchronous turn needs of asyncio: an event loop of its own for the gateway's stream, and
the Stop that cuts it short.

The gateway streams asynchronously. The turn runs in one thread (the request's, or the one
``chat.services.turn.shell`` starts for the websocket and the streaming answers) and drives what
must be awaited on an event loop that belongs to it alone (``Driver``): its host queue and its
connections are safe from any thread and loop. ``TurnStop.stop``, called from any thread (the
shell's, when the page's Stop or a client going away cancels it), cancels what the driver awaits
at once, as cancelling the turn's task did when it was a coroutine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Hears a line of text: a delta of the reply, or why the reply waits.
Hear = Callable[[str], None]


class TurnStopped(Exception):
    """The turn was stopped (``TurnStop.stop``): what was stored stays stored."""


class TurnStop:
    """Stops a running turn from another thread: what its driver awaits is cancelled at once, and the
    turn ends at its next look (``check``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False
        self._running: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._running is not None:
                loop, task = self._running
                loop.call_soon_threadsafe(task.cancel)

    def check(self) -> None:
        """Raises TurnStopped once the turn was stopped."""
        if self._stopped:
            raise TurnStopped

    def _started(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        with self._lock:
            self._running = (loop, task)
            if self._stopped:
                task.cancel()

    def _ended(self) -> None:
        with self._lock:
            self._running = None


class Driver:
    """The turn's own event loop, in the turn's thread; ``close`` it when the turn ends."""

    def __init__(self, stop: TurnStop) -> None:
        self.stop = stop
        self.loop = asyncio.new_event_loop()

    def run(self, awaitable: Coroutine[Any, Any, T], *, stoppable: bool = True) -> T:
        """The awaitable's result; asyncio.CancelledError when the turn is stopped meanwhile (``stoppable``)."""
        task = self.loop.create_task(awaitable)
        if stoppable:
            self.stop._started(self.loop, task)
        try:
            return self.loop.run_until_complete(task)
        finally:
            if stoppable:
                self.stop._ended()

    def in_thread(self, work: Callable[[], T]) -> T:
        """``work`` in a worker thread of its own, which Stop leaves to finish on its own."""
        return self.run(asyncio.to_thread(work))

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()
