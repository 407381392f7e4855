"""The turn's listeners (``TurnListeners``): the turn's thread hands them what it heard without waiting,
and they run on the caller's loop one at a time, in the order it heard them."""

from __future__ import annotations

import asyncio
import threading

import pytest

from chat.services.turn import TurnListeners


async def test_the_turn_does_not_wait_for_its_listeners_and_they_run_in_order():
    heard: list[str] = []
    slow_one_started = asyncio.Event()
    let_go = asyncio.Event()

    async def listener(value: str) -> None:
        if value == "first":
            slow_one_started.set()
            await let_go.wait()
        heard.append(value)

    listeners = TurnListeners(asyncio.get_running_loop())
    hear = listeners.of(listener)
    assert hear is not None
    handed = threading.Event()

    def turn() -> None:
        for value in ("first", "second", "third"):
            hear(value)
        handed.set()  # all three handed over while the first listener still waits

    await asyncio.to_thread(turn)
    assert handed.is_set()
    await slow_one_started.wait()
    assert heard == []
    let_go.set()
    await listeners.drained()
    assert heard == ["first", "second", "third"]


async def test_a_failing_listener_lets_the_next_run_and_drained_raises_its_error():
    heard: list[str] = []

    async def listener(value: str) -> None:
        if value == "bad":
            raise ValueError("the page could not be rendered")
        heard.append(value)

    listeners = TurnListeners(asyncio.get_running_loop())
    hear = listeners.of(listener)
    assert hear is not None
    await asyncio.to_thread(lambda: [hear(v) for v in ("bad", "good")])
    with pytest.raises(ValueError, match="could not be rendered"):
        await listeners.drained()
    assert heard == ["good"]


def test_no_listener_is_no_callable():
    assert TurnListeners(asyncio.new_event_loop()).of(None) is None
