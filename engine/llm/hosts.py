"""The model hosts: one queue each, and what the gateway knows of their health.

Every generation on a host waits in that host's queue (``HostQueue``) before its request is
sent, so a client timeout measures a stalled generation, never time spent queued. Who goes
next is ``engine.core.scheduling``'s rule: chat turns first, background work (summaries,
aging, merges) at most ``max_wait`` behind them. Token counts do not queue: the bundled
server counts with its tokenizer, not the model, and a message is stored before anything else.

The queue lives in this process. Under Celery the worker's summaries and the web server's turns
queue apart; the bundled model server then keeps the same rule itself (``X-Ollm-Priority``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from engine.core.scheduling import Waiting, next_to_run, wait_left
from engine.llm.ollama_backend import OllamaBackend
from engine.llm.types import Failure, QueueState

# Told how many requests are ahead when a request cannot start at once, again every ``HostQueue.tick``
# seconds while it waits (so a page can show its place and the time waited, live), and 0 when it starts.
OnQueued = Callable[[int], Awaitable[None]]
RECENT_FAILURES = 10


@dataclass(eq=False)
class _Ticket:
    waiting: Waiting
    loop: asyncio.AbstractEventLoop
    granted: asyncio.Future[None]
    admitted: bool = False


class HostQueue:
    """At most ``slots`` generations at once on one host; safe to use from any thread and event loop."""

    def __init__(
        self, *, slots: int, max_wait: float, clock: Callable[[], float] = time.monotonic, tick: float = 1.0
    ) -> None:
        if slots < 1:
            raise ValueError("a host runs at least one generation at a time")
        self.slots = slots
        self.tick = tick
        self.max_wait = max_wait
        self._clock = clock
        self._lock = threading.Lock()
        self._queue: list[_Ticket] = []
        self._running = 0
        self._served = 0
        self._longest_background_wait = 0.0

    def state(self) -> QueueState:
        with self._lock:
            background = sum(ticket.waiting.background for ticket in self._queue)
            return QueueState(
                running=self._running,
                queued_turns=len(self._queue) - background,
                queued_background=background,
                served=self._served,
                longest_background_wait=self._longest_background_wait,
            )

    @property
    def load(self) -> int:
        """Requests running or queued: how busy the host is."""
        with self._lock:
            return self._running + len(self._queue)

    @asynccontextmanager
    async def slot(self, *, background: bool, on_queued: OnQueued | None = None) -> AsyncIterator[float]:
        """Hold one of the host's slots for the block; gives the seconds spent waiting for it.
        Cancelling the wait leaves the queue as if the request never came."""
        loop = asyncio.get_running_loop()
        ticket = _Ticket(Waiting(background=background, since=self._clock()), loop, loop.create_future())
        with self._lock:
            self._queue.append(ticket)
            self._dispatch()
            ahead = 0 if ticket.admitted else self._queue.index(ticket) + self._running
        timer = None
        try:
            if not ticket.admitted:
                left = wait_left(ticket.waiting, now=self._clock(), max_wait=self.max_wait)
                if left is not None:
                    timer = loop.call_later(left, self._run_overdue, ticket)
                if on_queued is not None:
                    await on_queued(ahead)
                    while not (await asyncio.wait({ticket.granted}, timeout=self.tick))[0]:
                        await on_queued(self._ahead(ticket))
            await ticket.granted
            if ahead and on_queued is not None:
                await on_queued(0)
        except BaseException:
            self._withdraw(ticket)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        try:
            yield self._clock() - ticket.waiting.since
        finally:
            with self._lock:
                self._running -= 1
                self._dispatch()

    def _ahead(self, ticket: _Ticket) -> int:
        """Requests running or before ``ticket`` in the queue; at least 1 while it waits."""
        with self._lock:
            if ticket.admitted or ticket not in self._queue:
                return 0
            return max(self._queue.index(ticket) + self._running, 1)

    def _dispatch(self) -> None:
        """Fill free slots from the queue. Precondition: ``_lock`` held."""
        while self._running < self.slots:
            index = next_to_run([t.waiting for t in self._queue], now=self._clock(), max_wait=self.max_wait)
            if index is None:
                return
            self._admit(self._queue.pop(index))

    def _admit(self, ticket: _Ticket) -> None:
        """Precondition: ``_lock`` held and ``ticket`` taken off the queue."""
        ticket.admitted = True
        self._running += 1
        self._served += 1
        if ticket.waiting.background:
            waited = self._clock() - ticket.waiting.since
            self._longest_background_wait = max(self._longest_background_wait, waited)
        if ticket.loop.is_closed():
            return
        ticket.loop.call_soon_threadsafe(_resolve, ticket.granted)

    def _run_overdue(self, ticket: _Ticket) -> None:
        """Background work that waited its bound runs now, beside the slots if they are all taken."""
        with self._lock:
            if ticket in self._queue:
                self._queue.remove(ticket)
                self._admit(ticket)

    def _withdraw(self, ticket: _Ticket) -> None:
        with self._lock:
            if ticket.admitted:
                self._running -= 1
                self._dispatch()
            elif ticket in self._queue:
                self._queue.remove(ticket)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass
class Host:
    """One model host (the bundled model server or an Ollama server), its queue and its health."""

    backend: OllamaBackend
    queue: HostQueue
    retry_after: float
    down_until: float = 0.0  # time.monotonic(); 0: up
    failures: deque[Failure] = field(default_factory=lambda: deque(maxlen=RECENT_FAILURES))
    models: tuple[str, ...] | None = None  # as last listed; None: not asked yet
    # Requests it answered whole, and those that failed on it for want of the host, counted apart.
    served: int = 0
    failed: int = 0

    @property
    def url(self) -> str:
        """The host's URL as reports and logs show it: without credentials (the backend keeps them)."""
        return self.backend.shown_host

    def is_down(self) -> bool:
        return time.monotonic() < self.down_until

    def mark_down(self, error: str) -> None:
        """A request failed for want of the host: leave it alone for ``retry_after`` seconds."""
        self.failures.append(Failure(at=time.time(), error=error))
        self.down_until = time.monotonic() + self.retry_after

    def mark_up(self) -> None:
        self.down_until = 0.0

    def request_failed(self, error: str) -> None:
        """A request sent to it failed for want of the host: counted, and the host left alone a while."""
        self.failed += 1
        self.mark_down(error)

    def request_served(self) -> None:
        self.served += 1
        self.mark_up()
