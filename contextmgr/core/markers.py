"""Goal markers in assistant output.

    [GOAL] Implement user authentication system
    [CHECKPOINT] Design authentication flow - COMPLETED
    [DECISION] Use JWT for authentication - LOCKED
    [ARTIFACT] Created src/auth/login.ts
    [NEXT] Complete JWT token generation

The parser is tolerant of case, spacing, markdown bullets, emphasis and
quoting; lines that do not form a complete marker are ignored. It never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from contextmgr.core.prompts import GoalCheckpointStatus

MAX_MARKER_TEXT = 500
# A marker is one short line; longer lines are prose and skipping them bounds
# the regex work on hostile input.
MAX_MARKER_LINE = 1000


@dataclass(frozen=True)
class GoalSet:
    description: str


@dataclass(frozen=True)
class CheckpointUpdate:
    description: str
    status: GoalCheckpointStatus


@dataclass(frozen=True)
class DecisionUpdate:
    description: str
    locked: bool


@dataclass(frozen=True)
class ArtifactRecord:
    action: Literal["created", "modified"]
    path: str


@dataclass(frozen=True)
class NextStep:
    text: str


GoalUpdate = GoalSet | CheckpointUpdate | DecisionUpdate | ArtifactRecord | NextStep

_PREFIX = re.compile(
    r"^\s*(?:>\s*)*(?:[-*+•]\s+|\d+[.)]\s+)?[*_`]*\s*\[\s*([a-z]+)\s*\][*_`]*\s*[:\-–—]?\s*(.*)$", re.I
)
# The status is the last word of the line; it is searched for only in the
# line's tail so a long description cannot make the regex backtrack.
_STATUS = re.compile(
    r"[\s*_`]*[-–—:|(]\s*[*_`]*\s*(completed?|done|in[\s_-]*progress|pending|todo|locked|unlocked|open)\s*[)*_`]*\s*\.?$",
    re.I,
)
_STATUS_TAIL = 48
_BARE_STATUS = re.compile(r"(completed?|done|in[\s_-]*progress|pending|todo|locked|unlocked|open)", re.I)
_ARTIFACT = re.compile(r"^(created|modified|updated|added|changed)\s+[`'\"]?([^`'\"]+?)[`'\"]?\s*\.?$", re.I)

_CHECKPOINT_STATUS: dict[str, GoalCheckpointStatus] = {
    "complete": "completed",
    "completed": "completed",
    "done": "completed",
    "inprogress": "in-progress",
    "pending": "pending",
    "todo": "pending",
}


def _clean(text: str) -> str:
    text = text.replace("\x00", "").strip().strip("*_`").strip()
    return re.sub(r"\s+", " ", text)[:MAX_MARKER_TEXT]


def _split_status(rest: str) -> tuple[str, str | None]:
    if _BARE_STATUS.fullmatch(_clean(rest)):
        # "[CHECKPOINT] - COMPLETED": a status with nothing to apply it to.
        return "", None
    match = _STATUS.search(rest, max(0, len(rest) - _STATUS_TAIL))
    if match is None:
        return _clean(rest), None
    return _clean(rest[: match.start()]), re.sub(r"[\s_-]", "", match.group(1).lower())


def _parse_line(line: str) -> GoalUpdate | None:
    match = _PREFIX.match(line)
    if match is None:
        return None
    kind, rest = match.group(1).upper(), match.group(2)
    if kind == "GOAL":
        description = _clean(rest)
        return GoalSet(description) if description else None
    if kind == "NEXT":
        text = _clean(rest)
        return NextStep(text) if text else None
    if kind == "ARTIFACT":
        artifact = _ARTIFACT.match(_clean(rest))
        if artifact is None:
            return None
        action: Literal["created", "modified"] = (
            "created" if artifact.group(1).lower() in {"created", "added"} else "modified"
        )
        return ArtifactRecord(action=action, path=artifact.group(2).strip())
    if kind == "CHECKPOINT":
        description, status = _split_status(rest)
        if not description or status in {"locked", "unlocked", "open"}:
            return None
        return CheckpointUpdate(description, _CHECKPOINT_STATUS[status] if status else "pending")
    if kind == "DECISION":
        description, status = _split_status(rest)
        if not description or status not in {None, "locked", "unlocked", "open"}:
            return None
        return DecisionUpdate(description, locked=status == "locked")
    return None


def parse_markers(text: str) -> list[GoalUpdate]:
    """Every well-formed marker in ``text``, in order."""
    updates = []
    for line in text.splitlines():
        if len(line) > MAX_MARKER_LINE:
            continue
        update = _parse_line(line)
        if update is not None:
            updates.append(update)
    return updates


@dataclass(frozen=True)
class MarkerFacts:
    """What a checkpoint keeps from its messages' markers, whatever the summary says."""

    key_decisions: tuple[str, ...]
    files_modified: tuple[str, ...]
    next_steps: tuple[str, ...]


def marker_facts(texts: Iterable[str]) -> MarkerFacts:
    """Decisions, file paths and next steps named by markers in ``texts``, in order, without repeats."""
    updates = [update for text in texts for update in parse_markers(text)]
    return MarkerFacts(
        key_decisions=tuple(dict.fromkeys(u.description for u in updates if isinstance(u, DecisionUpdate))),
        files_modified=tuple(dict.fromkeys(u.path for u in updates if isinstance(u, ArtifactRecord))),
        next_steps=tuple(dict.fromkeys(u.text for u in updates if isinstance(u, NextStep))),
    )
