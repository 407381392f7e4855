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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from engine.core.prompts import GoalCheckpointStatus

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


# What a checkpoint lists of its messages' markers: the newest next steps only (a later plan supersedes an
# earlier one) and the newest files. Listed in full, replies made of marker lines would be outweighed by
# their own checkpoint, which then frees nothing (issue 47); the full history keeps every one.
CHECKPOINT_NEXT_STEPS = 3
CHECKPOINT_FILES = 20


def newest(items: Iterable[str], count: int) -> tuple[str, ...]:
    """The last ``count`` of ``items`` (oldest first), each once, in order."""
    unique = tuple(dict.fromkeys(items))
    return unique[max(0, len(unique) - count) :]


# How far along a goal checkpoint is: a summary only ever moves one forward.
CHECKPOINT_PROGRESS: dict[GoalCheckpointStatus, int] = {"pending": 0, "in-progress": 1, "completed": 2}
# "<path>", "<decision>": the request's own placeholders, copied by a model instead of filled in.
_PLACEHOLDER = re.compile(r"^<[^<>]*>$")


@dataclass(frozen=True)
class SummaryOutput:
    """A goal-aware summary split into its prose and the marker lines it ends with
    (``prompts.SUMMARY_MARKERS_REQUEST``)."""

    prose: str
    checkpoints: tuple[CheckpointUpdate, ...] = ()
    decisions: tuple[DecisionUpdate, ...] = ()
    artifacts: tuple[ArtifactRecord, ...] = ()
    next_steps: tuple[str, ...] = ()


def split_summary(summary: str) -> SummaryOutput:
    """The prose of ``summary`` (its marker lines removed; the whole text if nothing else is left)
    and what those lines name, placeholders left unfilled dropped. A ``[GOAL]`` line is dropped
    too: a summary never changes the goal."""
    prose_lines: list[str] = []
    updates: list[GoalUpdate] = []
    for line in summary.splitlines():
        update = _parse_line(line) if len(line) <= MAX_MARKER_LINE else None
        if update is None:
            prose_lines.append(line)
        elif not _PLACEHOLDER.match(_marker_text(update)):
            updates.append(update)
    prose = "\n".join(prose_lines).strip()
    return SummaryOutput(
        prose=prose or summary.strip(),
        checkpoints=tuple(u for u in updates if isinstance(u, CheckpointUpdate)),
        decisions=tuple(u for u in updates if isinstance(u, DecisionUpdate)),
        artifacts=tuple(u for u in updates if isinstance(u, ArtifactRecord)),
        next_steps=tuple(dict.fromkeys(u.text for u in updates if isinstance(u, NextStep))),
    )


def _marker_text(update: GoalUpdate) -> str:
    if isinstance(update, NextStep):
        return update.text
    if isinstance(update, ArtifactRecord):
        return update.path
    return update.description


def checkpoint_advances(
    updates: Iterable[CheckpointUpdate], stored: Mapping[str, GoalCheckpointStatus]
) -> tuple[CheckpointUpdate, ...]:
    """The ``updates`` that move a goal checkpoint of ``stored`` (description -> status) further
    along, matched without regard to case and named as stored; the furthest one per checkpoint.
    A summary may copy an older reply's "IN PROGRESS" or invent a checkpoint: neither applies."""
    names = {description.casefold(): description for description in stored}
    furthest: dict[str, CheckpointUpdate] = {}
    for update in updates:
        name = names.get(update.description.casefold())
        if name is None:
            continue
        best = furthest.get(name)
        if best is None or CHECKPOINT_PROGRESS[update.status] > CHECKPOINT_PROGRESS[best.status]:
            furthest[name] = CheckpointUpdate(name, update.status)
    return tuple(
        update
        for name, update in furthest.items()
        if CHECKPOINT_PROGRESS[update.status] > CHECKPOINT_PROGRESS[stored[name]]
    )
