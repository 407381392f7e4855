"""Plain-language lines and a small chart for the timeline, the history and the admin; pure
functions over stored data, so that every page says the same thing in the same words."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.core.aging import Level
from engine.core.backoff import seconds_text
from engine.core.reliability import LEVEL_FLOORS, ReliabilityLevel, score_percent
from engine.core.text import plural

# The chart's box in SVG user units. It scales to the card's width and no wider than the CSS allows,
# so the labels' 10-11 units stay about 10 px and up on a phone and never grow large on a desktop.
CHART_WIDTH = 300
CHART_HEIGHT = 190
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 34, 292, 24, 156
MAX_X_LABELS = 7
WARNING_LEVELS = (ReliabilityLevel.LOW, ReliabilityLevel.CRITICAL)


def announce_event(event_type: str, payload: Any) -> str:
    """The line the chat page shows as an event arrives: what a compression did, in plain words, the
    figures (strategy, seconds, ledger) left to the timeline's line (``describe_event``); any other
    event reads as there."""
    data = payload if isinstance(payload, dict) else {}
    if event_type not in ("compressed", "rollover-complete"):
        return describe_event(event_type, payload)
    number, messages = data.get("compression"), data.get("messages")
    head = f"Compression #{number}" if isinstance(number, int) else "Compression"
    older = plural(messages, "older message") if isinstance(messages, int) else "Older messages"
    if event_type == "rollover-complete":
        yours = data.get("user_messages")
        mine = f" ({yours:,} of them yours)" if isinstance(yours, int) and yours else ""
        what = f"{older}{mine} and the earlier checkpoints became one summary"
    else:
        what = f"{older} became a checkpoint"
    before, after = data.get("tokens_before"), data.get("tokens_after")
    size = (
        f"; the context went from {before:,} to {after:,} tokens"
        if isinstance(before, int) and isinstance(after, int)
        else ""
    )
    return f"{head}: {what}{size}. The timeline has the figures."


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
        updates = data.get("goal_updates")
        goals = f"; the summary updated the goal: {', '.join(map(str, updates))}" if isinstance(updates, list) else ""
        return ", ".join(parts) + ledger + goals
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
        if levels[0] and levels[0] == levels[1]:
            # Summarized again at its level (checkpoints merged into the ultra one):
            # "aged from ultra → ultra" said nothing.
            again = ", still " if what != "Checkpoint" else " summarized again, still "
            line = numbered(what, "number") + again + levels[1]
        else:
            line = numbered(what, "number") + (f" aged {'from ' if levels[0] else 'to '}{moved}" if moved else " aged")
        return line + (f": {size}" if size else "") + _kept(data)
    if event_type == "prompt-truncated":
        figures = [data.get(key) for key in ("reported_tokens", "sent_tokens", "max_tokens")]
        if not all(isinstance(value, int) for value in figures):
            return "The model server cut the prompt: the model did not see the whole context"
        reported, sent, max_tokens = figures
        return (
            f"The model server evaluated {reported:,} of about {sent:,} prompt tokens: the model did not see "
            f"the whole context; this session's context is now {max_tokens:,} tokens"
        )
    if event_type == "model-switched":
        size = tokens("tokens_before", "tokens_after")
        window = tokens("max_tokens_before", "max_tokens")
        return (
            f"Model switched from {data.get('from', '?')} to {data.get('to', '?')}: the context recounted"
            + (f", its messages {size}" if size else "")
            + (f"; window {window}" if window else "")
        )
    if event_type == "recalled":
        items = [item for item in data.get("items", []) if isinstance(item, dict)]
        said = ", ".join(
            f"#{item.get('position')} for " + ", ".join(f"“{word}”" for word in item.get("words", [])) for item in items
        )
        answering = numbered("message", "message")
        return f"Recalled {plural(len(items), 'message')} of the history into the prompt answering {answering}: {said}"
    if event_type == "compression-error":
        return str(data.get("reason", "no reason recorded")) + _retry(data)
    if event_type in ("compression-skipped", "snapshot-error"):
        return str(data.get("reason", "no reason recorded"))
    if event_type in ("snapshot-created", "auto-snapshot-created"):
        size = f" ({data['tokens']:,} tokens)" if isinstance(data.get("tokens"), int) else ""
        snapshot = f" {data['snapshot']}" if isinstance(data.get("snapshot"), int) else ""
        return f"Snapshot{snapshot}{size} {data.get('reason', '')}".strip()
    if event_type == "snapshot-restored":
        number = data.get("snapshot")
        line = f"Restored snapshot {number}" if isinstance(number, int) else "Restored a snapshot"
        changes = [
            f"{plural(value, noun)} {verb}"
            for key, noun, verb in (
                ("messages_excluded", "message", "left the context (kept in the full history)"),
                ("checkpoints_retired", "checkpoint", "retired"),
            )
            if isinstance(value := data.get(key), int) and value
        ]
        if changes:
            line += ": " + ", ".join(changes)
        if isinstance(data.get("undo_snapshot"), int):
            line += f"; snapshot {data['undo_snapshot']} holds the state before, to undo it"
        elif "undo_snapshot" in data:
            line += "; it cannot be undone (snapshots are off)"
        return line + "."
    return event_type


def _retry(data: dict[str, Any]) -> str:
    """What follows a compression the model failed: when it is tried again, or that it no longer is."""
    attempt, attempts, wait = data.get("attempt"), data.get("attempts"), data.get("retry_in")
    if not isinstance(attempt, int) or not isinstance(attempts, int):
        return ""
    which = f" (attempt {attempt} of {attempts})"
    if isinstance(wait, int | float):
        return f"{which}; retrying in {seconds_text(wait)}"
    if data.get("gave_up"):
        return f"{which}; no more retries: the next message or Compress now tries again"
    return which


def _level(value: Any) -> str:
    """A level of a payload by its one name ("level 2 (old)", "ultra"); "" if it is not one."""
    return Level(value).display if isinstance(value, int) and value in Level._value2member_map_ else ""


# An event line names this many missing facts; the timeline lists them all.
MISSING_SHOWN = 5


def _kept(data: dict[str, Any]) -> str:
    """The share of its messages' facts the next prompt held, when measured."""
    retention = data.get("retention")
    if not isinstance(retention, int | float):
        return ""
    listed = data.get("missing")
    missing = [str(text) for text in listed] if isinstance(listed, list) else []
    more = ", …" if len(missing) > MISSING_SHOWN else ""
    lost = f" (missing: {', '.join(missing[:MISSING_SHOWN])}{more})" if missing else ""
    return f"; {percent(retention)} of its facts in the prompt{lost}"


def percent(value: float | None) -> str:
    """A share (retention, say) as a whole percent, 0-100 whatever is stored; empty when it was never measured
    (or is NaN)."""
    if value is None or math.isnan(value):
        return ""
    return f"{round(min(1.0, max(0.0, value)) * 100)}%"


def level_name(level: int) -> str:
    """A checkpoint level as shown: "level 2 (old)", or "ultra" for the merged one."""
    return Level(level).display


def describe_message_state(
    *, checkpoint_number: int | None, checkpoint_level: int | None, merged: bool, excluded: bool
) -> str:
    """Where a stored message stands: in the active context, summarized in a checkpoint (the
    checkpoint's number, level and whether it was merged into the ultra one), or in the full
    history only (after a restore, or too long for the context)."""
    if checkpoint_number is not None and checkpoint_level is not None:
        into_ultra = ", merged into the ultra checkpoint" if merged else ""
        return f"compressed into checkpoint #{checkpoint_number}, {level_name(checkpoint_level)}{into_ultra}"
    if excluded:
        return "history only, not in the context"
    return "in the active context"


@dataclass(frozen=True)
class ChartLine:
    """A threshold drawn across the plot: where ``label``'s level starts or ends."""

    label: str
    y: float
    kind: str  # the level's name, lower-cased: the line's CSS class


@dataclass(frozen=True)
class Chart:
    points: str
    dots: tuple[tuple[float, float, int], ...]
    x_ticks: tuple[tuple[float, int], ...]  # (x, compressions) of the labelled ones
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = PLOT_LEFT
    right: int = PLOT_RIGHT
    top: int = PLOT_TOP
    bottom: int = PLOT_BOTTOM

    @staticmethod
    def y(score: float) -> float:
        share = 0.0 if math.isnan(score) else min(max(score, 0.0), 1.0)
        return round(PLOT_BOTTOM - share * (PLOT_BOTTOM - PLOT_TOP), 1)

    @property
    def y_ticks(self) -> tuple[tuple[float, int], ...]:
        return tuple((self.y(percent / 100), percent) for percent in range(0, 101, 20))

    @property
    def bands(self) -> tuple[ChartLine, ...]:
        """The levels' bounds (``LEVEL_FLOORS``): a bound into a warning level (Low, Critical) is
        named for that level and what lies below it, the others for the level above."""
        below = [level for level, _ in LEVEL_FLOORS[1:]] + [ReliabilityLevel.CRITICAL]
        lines = []
        for (level, floor), under in zip(LEVEL_FLOORS, below, strict=True):
            shown = under if under in WARNING_LEVELS else level
            relation = "<" if shown is under else "≥"
            lines.append(ChartLine(f"{shown.label} {relation} {floor}%", self.y(floor / 100), shown.label.lower()))
        return tuple(lines)


def reliability_chart(scores: list[float]) -> Chart:
    """SVG coordinates for the reliability after each compression (the first point, at 0, is the start)."""
    step = (PLOT_RIGHT - PLOT_LEFT) / max(len(scores) - 1, 1)
    dots = tuple((round(PLOT_LEFT + i * step, 1), Chart.y(s), score_percent(s)) for i, s in enumerate(scores))
    every = max(1, math.ceil((len(scores) - 1) / (MAX_X_LABELS - 1)))
    ticks = tuple((x, i) for i, (x, _, _) in enumerate(dots) if i % every == 0)
    return Chart(points=" ".join(f"{x},{y}" for x, y, _ in dots), dots=dots, x_ticks=ticks or ((PLOT_LEFT, 0),))
