"""The chat turn, the front door: what the rest of the app may call. Its insides are ``take`` (one
turn, end to end, synchronously: ``turn_run``), ``variants`` (what a turn answers: a new message, a
retry, an edit…), ``room`` (the room the prompt leaves for a reply), ``driver`` (the turn's own event
loop for the gateway's stream, and the Stop that cuts it short) and ``shell`` (``turn_take``: the turn
in a thread of its own, awaited, for the websocket and the streaming answers); no module outside the
package imports them (pyproject.toml's import contracts)."""

from chat.services.turn.driver import Hear, TurnStop, TurnStopped
from chat.services.turn.shell import OnDelta, turn_in_thread, turn_listener, turn_take
from chat.services.turn.take import TurnOutcome, turn_run
from chat.services.turn.variants import (
    TurnContinue,
    TurnEdit,
    TurnRegenerate,
    TurnRetry,
    TurnSend,
    TurnToolResults,
    TurnVariant,
)

__all__ = [
    "Hear",
    "OnDelta",
    "TurnContinue",
    "TurnEdit",
    "TurnOutcome",
    "TurnRegenerate",
    "TurnRetry",
    "TurnSend",
    "TurnStop",
    "TurnStopped",
    "TurnToolResults",
    "TurnVariant",
    "turn_in_thread",
    "turn_listener",
    "turn_run",
    "turn_take",
]
