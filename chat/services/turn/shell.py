"""The async shell of the turn: ``turn_run`` in a thread of its own, for the websocket and the
streaming drop-in answers.

The turn runs whole in one thread it has to itself (not the one the consumers share for the
database, nor a pool's: a turn may wait minutes for its host); what it hears (the reply's deltas,
why it waits, its stored message) is handed to the caller's coroutines on the caller's loop, one at
a time and in order, the turn waiting for each (``turn_listener``). Cancelling the shell stops the
turn (``TurnStop``) and waits for it to store what it has: the part of a reply that came is kept,
as it always was (``turn_in_thread``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar
from uuid import UUID

from django.db import connections

from chat.models import Message
from chat.services.turn.driver import TurnStop, TurnStopped
from chat.services.turn.take import TurnOutcome, turn_run
from chat.services.turn.variants import TurnVariant
from engine.llm import Gateway

T = TypeVar("T")
V = TypeVar("V")
# The shell's listeners, coroutines on the caller's loop: the reply as it streams, why it waits, the stored message.
OnDelta = Callable[[str], Coroutine[Any, Any, None]]
OnWait = Callable[[str], Coroutine[Any, Any, None]]
OnStored = Callable[[Message], Coroutine[Any, Any, None]]


def turn_listener(
    *, loop: asyncio.AbstractEventLoop, listener: Callable[[V], Coroutine[Any, Any, None]] | None
) -> Callable[[V], None] | None:
    """``listener`` as the turn's thread calls it: run on ``loop``, the turn waiting until it has. The call
    that makes the coroutine is the turn thread's own: a listener that is a plain function returning one does
    its plain part there (a page's frame rendered through the turn's database connection)."""
    if listener is None:
        return None

    def heard(value: V) -> None:
        asyncio.run_coroutine_threadsafe(listener(value), loop).result()

    return heard


async def turn_in_thread(*, work: Callable[[TurnStop], T], name: str) -> T:
    """``work`` (a turn, handed the Stop that stops it) in a thread of its own, with the caller's context
    (the request's settings of the turn: ``sampling_requested``), awaited: its result, or what it raised.
    Cancelled, it stops the turn, waits for it to end (having stored the part of the reply that came),
    and raises asyncio.CancelledError; TurnStopped is raised as asyncio.CancelledError too."""
    loop = asyncio.get_running_loop()
    stop = TurnStop()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]  # None only with an error

    def run() -> None:
        result, error = None, None
        try:
            result = context.run(work, stop)
        except BaseException as exc:  # handed to the caller, whatever it is
            error = exc
        finally:
            connections.close_all()  # the turn's thread ends here: its database connections with it
        with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits for the turn
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        if done.done() and not done.cancelled():
            done.exception()  # retrieved: the turn ended as it was cancelled
            raise
        stop.stop()
        # What the turn stored of the reply is stored before the caller hears it was stopped.
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                continue
            except BaseException:
                break
        raise
    except TurnStopped:
        raise asyncio.CancelledError from None


async def turn_take(
    *,
    session_id: UUID,
    variant: TurnVariant,
    gateway: Gateway | None = None,
    on_delta: OnDelta | None = None,
    on_stored: OnStored | None = None,
    on_wait: OnWait | None = None,
    tools: Sequence[dict[str, Any]] = (),
    max_tokens: int | None = None,
    on_settled: Callable[[TurnOutcome], None] | None = None,
) -> TurnOutcome:
    """``turn_run`` awaited: the same turn, the same settled outcome and errors; its listeners are
    coroutines, run on the caller's loop. ``on_settled`` is a plain call, in the turn's own thread, once the
    turn is settled: what it reads (the page's last frame) goes through the turn's database connection,
    with no hand-over to another thread first. Cancelled, it stops the turn, waits for it to store the part
    of the reply that came, and raises asyncio.CancelledError."""
    loop = asyncio.get_running_loop()

    def work(stop: TurnStop) -> TurnOutcome:
        outcome = turn_run(
            session_id=session_id,
            variant=variant,
            gateway=gateway,
            on_delta=turn_listener(loop=loop, listener=on_delta),
            on_stored=turn_listener(loop=loop, listener=on_stored),
            on_wait=turn_listener(loop=loop, listener=on_wait),
            tools=tools,
            max_tokens=max_tokens,
            stop=stop,
        )
        if on_settled is not None:
            on_settled(outcome)
        return outcome

    return await turn_in_thread(work=work, name=f"turn {session_id}")
