"""Plain-language lines and a small chart for the timeline; pure functions over stored data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contextmgr.core.aging import Level
from contextmgr.core.text import plural

CHART_WIDTH = 320
CHART_HEIGHT = 80


def describe_event(event_type: str, payload: Any) -> str:
    """One line a user understands, from an event's stored payload; a figure the payload lacks
    (an event of an older version) is left out, never shown as a placeholder."""
    data = payload if isinstance(payload, dict) else {}

    def count(key: str, noun: str) -> str:
        value = data.get(key)
        return plural(value, noun) if isinstance(value, int) else f"some {noun}s"

    def tokens(before: str, after: str) -> str:
        values = [data.get(before), data.get(after)]
        if all(isinstance(v, int) for v in values):
            return f"{values[0]:,} → {values[1]:,} tokens"
        return f"{values[1]:,} tokens" if isinstance(values[1], int) else ""

    def numbered(what: str, key: str) -> str:
        value = data.get(key)
        return f"{what} #{value}" if isinstance(value, int) else what

    if event_type in ("compressed", "rollover-complete"):
        seconds = data.get("duration_ms", 0) / 1000 if isinstance(data.get("duration_ms"), int) else 0
        what = "Compression" if event_type == "compressed" else "Rollover (compression)"
        yours = data.get("user_messages")
        left = f" ({yours:,} of them yours)" if event_type == "rollover-complete" and isinstance(yours, int) else ""
        ledger = (
            f"; ledger {count('ledger_entries', 'fact')}, {data.get('ledger_dropped', 0):,} dropped"
            if isinstance(data.get("ledger_entries"), int)
            else ""
        )
        how = data.get("how") or data.get("strategy")
        parts = [f"{numbered(what, 'compression')}: {count('messages', 'message')}{left}"]
        if moved := tokens("tokens_before", "tokens_after"):
            parts.append(f"{moved} in context")
        parts.append(f"{seconds:.1f} s" + (f" ({how})" if how else ""))
        return ", ".join(parts) + ledger
    if event_type == "checkpoint-created":
        where = f" for {data['range']}" if isinstance(data.get("range"), str) else ""
        size = tokens("original_tokens", "tokens")
        return f"{numbered('Checkpoint', 'number')} created{where}" + (f": {size}" if size else "") + _kept(data)
    if event_type == "checkpoint-aged":
        merged = data.get("merged")
        what = (
            f"{len(merged)} checkpoints merged into" if isinstance(merged, list) and len(merged) > 1 else "Checkpoint"
        )
        levels = [_level(data.get("from_level")), _level(data.get("to_level"))]
        moved = " → ".join(level for level in levels if level)
        size = tokens("tokens_before", "tokens_after")
        line = numbered(what, "number") + (f" aged {'from ' if levels[0] else 'to '}{moved}" if moved else " aged")
        return line + (f": {size}" if size else "") + _kept(data)
    if event_type in ("compression-skipped", "compression-error", "snapshot-error"):
        return str(data.get("reason", "no reason recorded"))
    if event_type in ("snapshot-created", "auto-snapshot-created"):
        size = f" ({data['tokens']:,} tokens)" if isinstance(data.get("tokens"), int) else ""
        return f"{numbered('Snapshot', 'snapshot')}{size} {data.get('reason', '')}".strip()
    if event_type == "snapshot-restored":
        return f"Restored {numbered('snapshot', 'snapshot')}"
    return event_type


def _level(value: Any) -> str:
    """A level of a payload by its one name ("level 2 (old)", "ultra"); "" if it is not one."""
    return Level(value).display if isinstance(value, int) and value in Level._value2member_map_ else ""


def _kept(data: dict[str, Any]) -> str:
    """The share of its messages' facts the next prompt held, when measured."""
    retention = data.get("retention")
    return f"; {round(retention * 100)}% of its facts in the prompt" if isinstance(retention, int | float) else ""


@dataclass(frozen=True)
class Chart:
    points: str
    dots: tuple[tuple[float, float, int], ...]
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT

    def y(self, score: float) -> float:
        return round(self.height - score * self.height, 1)

    @property
    def bands(self) -> tuple[tuple[str, float], ...]:
        """The level bounds (85/60/40%) as horizontal guide lines."""
        return (("High", self.y(0.85)), ("Medium", self.y(0.6)), ("Low", self.y(0.4)))


def reliability_chart(scores: list[float]) -> Chart:
    """SVG coordinates for the reliability after each compression (the first point is the start)."""
    step = CHART_WIDTH / max(len(scores) - 1, 1)
    dots = tuple(
        (round(i * step, 1), round(CHART_HEIGHT - min(max(s, 0.0), 1.0) * CHART_HEIGHT, 1), round(s * 100))
        for i, s in enumerate(scores)
    )
    return Chart(points=" ".join(f"{x},{y}" for x, y, _ in dots), dots=dots)
