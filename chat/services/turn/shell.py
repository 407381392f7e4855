"""The async shell of the turn: ``turn_run`` in a thread of its own, for the websocket and the
streaming drop-in answers.

The turn runs whole in one thread it has to itself (not the one the consumers share for the
database, nor a pool's: a turn may wait minutes for its host); what it hears (the reply's deltas,
why it waits, its stored message) is handed to the caller's coroutines on the caller's loop, one at
a time and in order, the turn waiting for each. Cancelling ``turn_take`` stops the turn
(``TurnStop``) and waits for it to store what it has: the part of a reply that came is kept, as
it always was.
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
from chat.services.turn.take import TurnOutcome, TurnVariant, turn_run
from engine.llm import Gateway

T = TypeVar("T")
# The shell's listeners, coroutines on the caller's loop: the reply as it streams, why it waits, the stored message.
OnDelta = Callable[[str], Coroutine[Any, Any, None]]
OnWait = Callable[[str], Coroutine[Any, Any, None]]
OnStored = Callable[[Message], Coroutine[Any, Any, None]]


def _on_loop(
    loop: asyncio.AbstractEventLoop, listener: Callable[[T], Coroutine[Any, Any, None]] | None
) -> Callable[[T], None] | None:
    """``listener`` as the turn's thread calls it: run on ``loop``, the turn waiting until it has."""
    if listener is None:
        return None

    def heard(value: T) -> None:
        asyncio.run_coroutine_threadsafe(listener(value), loop).result()

    return heard


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
) -> TurnOutcome:
    """``turn_run`` awaited: the same turn, the same outcome and errors; its listeners are coroutines,
    run on the caller's loop. Cancelled, it stops the turn, waits for it to store the part of the reply
    that came, and raises asyncio.CancelledError."""
    loop = asyncio.get_running_loop()
    stop = TurnStop()
    done: asyncio.Future[TurnOutcome] = loop.create_future()
    context = contextvars.copy_context()  # the request's settings of the turn (``sampling_requested``)

    def settle(outcome: TurnOutcome | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            assert outcome is not None
            done.set_result(outcome)

    def run() -> None:
        outcome, error = None, None
        try:
            outcome = context.run(
                turn_run,
                session_id=session_id,
                variant=variant,
                gateway=gateway,
                on_delta=_on_loop(loop, on_delta),
                on_stored=_on_loop(loop, on_stored),
                on_wait=_on_loop(loop, on_wait),
                tools=tools,
                max_tokens=max_tokens,
                stop=stop,
            )
        except BaseException as exc:  # handed to the caller, whatever it is
            error = exc
        finally:
            connections.close_all()  # the turn's thread ends here: its database connections with it
        with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits for the turn any more
            loop.call_soon_threadsafe(settle, outcome, error)

    threading.Thread(target=run, name=f"turn {session_id}", daemon=True).start()
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
