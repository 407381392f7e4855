"""Plain-language lines and a small chart for the timeline, the history and the admin; pure
functions over stored data, so that every page says the same thing in the same words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contextmgr.core.aging import Level

CHART_WIDTH = 320
CHART_HEIGHT = 80


def describe_event(event_type: str, payload: Any) -> str:
    """One line a user understands, from an event's stored payload."""
    data = payload if isinstance(payload, dict) else {}

    def number(key: str) -> str:
        value = data.get(key)
        return f"{value:,}" if isinstance(value, int) else "?"

    if event_type in ("compressed", "rollover-complete"):
        seconds = data.get("duration_ms", 0) / 1000 if isinstance(data.get("duration_ms"), int) else 0
        what = "Compression" if event_type == "compressed" else "Rollover (compression)"
        left = f" ({number('user_messages')} of them yours)" if event_type == "rollover-complete" else ""
        ledger = (
            f"; ledger {number('ledger_entries')} facts, {number('ledger_dropped')} dropped"
            if "ledger_entries" in data
            else ""
        )
        return (
            f"{what} #{data.get('compression', '?')}: {number('messages')} messages{left}, "
            f"{number('tokens_before')} → {number('tokens_after')} tokens in context, {seconds:.1f} s "
            f"({data.get('how') or data.get('strategy') or ''}){ledger}"
        )
    if event_type == "checkpoint-created":
        return (
            f"Checkpoint #{data.get('number', '?')} created for {data.get('range', '?')}: "
            f"{number('original_tokens')} → {number('tokens')} tokens{_kept(data)}"
        )
    if event_type == "checkpoint-aged":
        merged = data.get("merged")
        what = (
            f"{len(merged)} checkpoints merged into" if isinstance(merged, list) and len(merged) > 1 else "Checkpoint"
        )
        return (
            f"{what} #{data.get('number', '?')} at level {data.get('from_level', '?')} → {data.get('to_level', '?')}: "
            f"{number('tokens_before')} → {number('tokens_after')} tokens{_kept(data)}"
        )
    if event_type in ("compression-skipped", "compression-error", "snapshot-error"):
        return str(data.get("reason", "no reason recorded"))
    if event_type in ("snapshot-created", "auto-snapshot-created"):
        return f"Snapshot {data.get('snapshot', '?')} ({number('tokens')} tokens) {data.get('reason', '')}".strip()
    if event_type == "snapshot-restored":
        return f"Restored snapshot {data.get('snapshot', '?')}"
    return event_type


def _kept(data: dict[str, Any]) -> str:
    """The share of its messages' facts the next prompt held, when measured."""
    retention = data.get("retention")
    return f"; {percent(retention)} of its facts in the prompt" if isinstance(retention, int | float) else ""


def percent(value: float | None) -> str:
    """A share (retention, say) as a whole percent; empty when it was never measured."""
    return "" if value is None else f"{round(value * 100)}%"


def level_name(level: int) -> str:
    """A checkpoint level as shown: "level 2 (old)", or "ultra" for the merged one."""
    name = Level(level).label
    return name if level == Level.ULTRA else f"level {level} ({name})"


def describe_message_state(
    *, checkpoint_number: int | None, checkpoint_level: int | None, merged: bool, excluded: bool
) -> str:
    """Where a stored message stands: in the active context, summarized in a checkpoint (the
    checkpoint's number, level and whether it was merged into the ultra one), or in the full
    history only (after a restore, or too long for the context)."""
    if checkpoint_number is not None and checkpoint_level is not None:
        into_ultra = ", merged into the ultra checkpoint" if merged else ""
        return f"compressed into checkpoint #{checkpoint_number} ({level_name(checkpoint_level)}{into_ultra})"
    if excluded:
        return "history only, not in the context"
    return "in the active context"


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
