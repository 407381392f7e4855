"""What the context panels of the chat page show (the meter, reliability, goals, snapshots,
settings): template contexts read from the selectors, one reading of the budget per panel set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from chat.models import Artifact, Goal, Session
from chat.selectors.context import (
    ContextReport,
    active_goal,
    artifacts_of_session,
    context_meter,
    decisions_of_session,
    default_config,
    prompt_truncation_in_force,
    session_config,
    session_context,
    session_goals,
    session_snapshots,
    sessions_context,
)
from chat.selectors.sessions import sidebar_sessions
from chat.services.compression import session_effective_limits
from engine.core.config import OLLAMA_SAMPLING_DEFAULTS, SAMPLING_RANGES, STRATEGIES
from engine.core.meter import build_meter
from engine.core.reliability import (
    RECOMMENDATIONS,
    WARNING_HEADING,
    ReliabilityLevel,
    low_reliability_warning,
)


def session_list_rows(sessions: Sequence[Session]) -> list[dict[str, Any]]:
    """What the sessions list shows of each session (how full its context is, how reliable), read
    for the whole list at once: a full panel a row cost about ten queries."""
    reports = sessions_context(sessions=sessions)
    return [
        {
            "session": session,
            "meter": build_meter(reports[session.pk].budget, ()),
            "reliability": reports[session.pk].reliability,
        }
        for session in sessions
    ]


def context_panel(session: Session, *, report: ContextReport | None = None) -> dict[str, Any]:
    """What the meter, the reliability badge and the warning panel show: one reading of the
    budget and the reliability serves them all (it is shown after every reply). ``report``: that
    reading when the caller has just made it (the turn, once its reply is stored)."""
    report = report or session_context(session=session)
    reliability = report.reliability
    warning = low_reliability_warning(
        model=session.model,
        parameter_size_b=session.model_parameter_size_b,
        compression_count=report.compression_count,
    )
    return {
        "meter": context_meter(session=session, report=report),
        "exact": report.messages_exact,
        "reliability": reliability,
        "compression_count": report.compression_count,
        "warning": warning,
        "warning_heading": WARNING_HEADING,
        # A low score alone (no warning yet for the model's size) shows the spec's recommendations too.
        "recommendations": warning.recommendations if warning else RECOMMENDATIONS,
        # Before any compression nothing is compressed to distrust, whatever the model's size.
        "reliability_low": report.compression_count > 0
        and reliability.level in (ReliabilityLevel.LOW, ReliabilityLevel.CRITICAL),
        "truncation": prompt_truncation_in_force(session=session),
    }


def goals_context(session: Session) -> dict[str, Any]:
    return {
        "goals": session_goals(session=session),
        "active_goal": active_goal(session=session),
        "decisions": decisions_of_session(session=session),
        "artifacts": artifacts_of_session(session=session)[:20],
        "priorities": Goal.Priority.values,
        "statuses": Goal.Status.values,
        "artifact_actions": Artifact.Action.values,
    }


def snapshots_context(session: Session) -> dict[str, Any]:
    # The panel lists when, what kind and how big; each state (JSON) is read only by a restore.
    return {
        "snapshots": session_snapshots(session=session).defer("state")[:20],
        "snapshot_config": session_config(session).snapshots,
    }


# The sampling settings the panel shows, with their labels and steps; the others (repeat_last_n,
# seed) are set through the API, and saving the panel keeps them.
PANEL_SAMPLING = {"temperature": ("temperature", 0.05), "repeat_penalty": ("repeat penalty", 0.05),
                  "top_k": ("top k", 1), "top_p": ("top p", 0.05)}  # fmt: skip


@dataclass(frozen=True)
class SamplingField:
    """One sampling setting of the panel: the session's own value, and what it follows without one
    (the global default; None: the model's)."""

    name: str
    label: str
    step: float
    low: float
    high: float | None
    value: float | None
    default: float | None


def _section(session: Session, name: str) -> dict[str, Any]:
    section = session.settings.get(name) if isinstance(session.settings, dict) else None
    return section if isinstance(section, dict) else {}


def settings_context(session: Session) -> dict[str, Any]:
    """The settings panel: the session's settings, what they come to on its context (``limits``),
    the token values it set itself (``explicit``; the others follow the context size), and its
    sampling settings (``sampling_fields``)."""
    config = session_config(session)
    own = _section(session, "sampling")
    defaults = default_config().sampling
    fields = [
        SamplingField(name, label, step, *SAMPLING_RANGES[name][:2], own.get(name), getattr(defaults, name))
        for name, (label, step) in PANEL_SAMPLING.items()
    ]
    return {
        "config": config,
        "limits": session_effective_limits(session, config),
        "explicit": _section(session, "compression"),
        "strategies": STRATEGIES,
        "sampling_fields": fields,
        "model_sampling": OLLAMA_SAMPLING_DEFAULTS,
    }


def sidebar_context(user: Any, current: UUID | None, *, archived: bool = False) -> dict[str, Any]:
    """What the chat page's sidebar lists (``sidebar_sessions``): it asks again every few seconds while the
    current session waits for its title."""
    rows = sidebar_sessions(user=user, archived=archived)
    current_row = next((s for s, _ in rows if s.pk == current), None)
    return {
        # Once written, the current session's title, for the page's heading (a refresh of the list brings it).
        "sidebar_current_title": current_row.title if current_row and not current_row.title_pending else "",
        "sidebar_rows": rows,
        "sidebar_current": current,
        "sidebar_archived": archived,
        "sidebar_polling": not archived and any(s.pk == current and s.title_pending for s, _ in rows),
    }
