"""The chat turn, the front door: what the rest of the app may call. Its insides are ``take`` (one
turn, end to end) and ``room`` (the room the prompt leaves for a reply); no module outside the
package imports them (pyproject.toml's import contracts)."""

from chat.services.turn.take import (
    OnDelta,
    TurnContinue,
    TurnEdit,
    TurnOutcome,
    TurnRegenerate,
    TurnRetry,
    TurnSend,
    TurnToolResults,
    TurnVariant,
    turn_take,
)

__all__ = [
    "OnDelta",
    "TurnContinue",
    "TurnEdit",
    "TurnOutcome",
    "TurnRegenerate",
    "TurnRetry",
    "TurnSend",
    "TurnToolResults",
    "TurnVariant",
    "turn_take",
]
