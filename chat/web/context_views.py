"""Dashboard actions on the context: goals, decisions, artifacts, snapshots, compression, and
the aging timeline. HTMX posts get the re-rendered panel back (with the meter out of band)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Page, Paginator
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from chat.models import EventType, Goal, Message, Session, Snapshot
from chat.selectors.context import (
    active_goal,
    owned_decision,
    owned_goal,
    owned_goal_checkpoint,
    owned_snapshot,
    reliability_history,
    session_checkpoints,
    session_config,
    session_events,
    session_last_event_id,
)
from chat.selectors.presentation import describe_event, reliability_chart
from chat.selectors.sessions import session_for_owner, session_for_viewer
from chat.services.compression import (
    compression_running,
    compression_schedule,
)
from chat.services.goals import (
    CURRENT_GOAL_OUTCOMES,
    artifact_record,
    decision_record,
    decision_update,
    goal_checkpoint_set,
    goal_checkpoint_update,
    goal_create,
    goal_delete,
    goal_update,
)
from chat.services.snapshots import SnapshotError, snapshot_create, snapshot_restore
from chat.web.fragments import chat_fragments
from chat.web.panels import context_panel, goals_context, snapshots_context
from engine.core.reliability import compute_reliability


def _goals_panel(request: HttpRequest, session: Session, error: str = "") -> HttpResponse:
    """The goals panel, with the meter out of band: the pinned block's size changed."""
    context = {"session": session, "can_write": True, "goal_error": error, "oob": True}
    return render(
        request,
        "chat/_goals_response.html",
        {**context, **goals_context(session), **context_panel(session)},
        status=422 if error else 200,
    )


def _apply(request: HttpRequest, session: Session, action: Callable[[], object]) -> HttpResponse:
    try:
        action()
    except ValidationError as exc:
        return _goals_panel(request, session, " ".join(exc.messages))
    return _goals_panel(request, session)


def _flag(request: HttpRequest, name: str) -> bool | None:
    value = request.POST.get(name)
    return None if value is None else value in ("1", "true", "on")


def _optional(request: HttpRequest, name: str) -> str | None:
    return request.POST.get(name)


@login_required
@require_POST
def goal_new(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    # The form asks what becomes of the active goal (issue 47, item 8): it is never paused unasked.
    current = active_goal(session=session)
    becomes = request.POST.get("current", "")
    if current is not None and becomes not in CURRENT_GOAL_OUTCOMES:
        return _goals_panel(
            request, session, f"Choose whether the current goal, “{current.description}”, is paused or completed."
        )
    return _apply(
        request,
        session,
        lambda: goal_create(
            session=session,
            description=request.POST.get("description", ""),
            priority=request.POST.get("priority", Goal.Priority.MEDIUM),
            current_becomes=becomes or Goal.Status.PAUSED,
        ),
    )


@login_required
@require_POST
def goal_edit(request: HttpRequest, goal_id: int) -> HttpResponse:
    goal = owned_goal(user=request.user, goal_id=goal_id)
    return _apply(
        request,
        goal.session,
        lambda: goal_update(
            goal=goal,
            description=_optional(request, "description"),
            priority=_optional(request, "priority"),
            status=_optional(request, "status"),
        ),
    )


@login_required
@require_POST
def goal_remove(request: HttpRequest, goal_id: int) -> HttpResponse:
    goal = owned_goal(user=request.user, goal_id=goal_id)
    return _apply(request, goal.session, lambda: goal_delete(goal=goal))


@login_required
@require_POST
def goal_checkpoint_new(request: HttpRequest, goal_id: int) -> HttpResponse:
    goal = owned_goal(user=request.user, goal_id=goal_id)
    return _apply(
        request, goal.session, lambda: goal_checkpoint_set(goal=goal, description=request.POST.get("description", ""))
    )


@login_required
@require_POST
def goal_checkpoint_edit(request: HttpRequest, checkpoint_id: int) -> HttpResponse:
    checkpoint = owned_goal_checkpoint(user=request.user, checkpoint_id=checkpoint_id)
    return _apply(
        request,
        checkpoint.goal.session,
        lambda: goal_checkpoint_update(
            checkpoint=checkpoint, description=_optional(request, "description"), status=_optional(request, "status")
        ),
    )


@login_required
@require_POST
def decision_new(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    return _apply(
        request,
        session,
        lambda: decision_record(
            session=session,
            description=request.POST.get("description", ""),
            locked=bool(_flag(request, "locked")),
            goal=active_goal(session=session),
        ),
    )


@login_required
@require_POST
def decision_edit(request: HttpRequest, decision_id: int) -> HttpResponse:
    decision = owned_decision(user=request.user, decision_id=decision_id)
    return _apply(
        request,
        decision.session,
        lambda: decision_update(
            decision=decision, description=_optional(request, "description"), locked=_flag(request, "locked")
        ),
    )


@login_required
@require_POST
def artifact_new(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    return _apply(
        request,
        session,
        lambda: artifact_record(
            session=session, path=request.POST.get("path", ""), action=request.POST.get("action", "")
        ),
    )


@login_required
@require_POST
def snapshot_new(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    error = ""
    try:
        snapshot_create(session=session, kind=Snapshot.Kind.MANUAL, reason="created from the dashboard")
    except SnapshotError as exc:
        error = str(exc)
    return render(
        request,
        "chat/_snapshots.html",
        {"session": session, "can_write": True, "snapshot_error": error, **snapshots_context(session)},
        status=409 if error else 200,
    )


@login_required
@require_http_methods(["GET", "POST"])
def snapshot_restore_page(request: HttpRequest, snapshot_id: int) -> HttpResponse:
    snapshot = owned_snapshot(user=request.user, snapshot_id=snapshot_id)
    session = snapshot.session
    error = ""
    if request.method == "POST":
        last_event = session_last_event_id(session=session)
        try:
            snapshot_restore(snapshot=snapshot)
        except SnapshotError as exc:
            error = str(exc)
        else:
            restored = session_events(session=session, after=last_event).filter(type=EventType.SNAPSHOT_RESTORED).last()
            line = describe_event(EventType.SNAPSHOT_RESTORED, restored.payload if restored else {})
            if request.headers.get("HX-Request"):
                # From the chat page: the history, meter, warning, goals and snapshots as restored, and
                # the line that says what was restored, all in place (issue 47, item 6).
                event = {"type": EventType.SNAPSHOT_RESTORED.value, "payload": restored.payload if restored else {}}
                return HttpResponse(chat_fragments("event", session.pk, event=event, with_history=True))
            messages.success(request, line)
            return redirect("chat:chat", session_id=session.pk)
        if request.headers.get("HX-Request"):
            return HttpResponse(
                render_to_string(
                    "chat/_progress.html",
                    {"session": session, "text": error, "oob": True, "event_type": "snapshot-error"},
                )
            )
    written_after = Message.objects.filter(session=session, position__gt=snapshot.message_count).count()
    return render(
        request,
        "chat/snapshot_restore.html",
        {
            "session": session,
            "snapshot": snapshot,
            "written_after": written_after,
            "undo_taken": session_config(session).snapshots.enabled,
            "error": error,
            **context_panel(session),
        },
        status=409 if error else 200,
    )


@login_required
@require_POST
def compress_now(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    if compression_running(session_id=session.pk):
        text = "A compression of this session is already running."
    else:
        with transaction.atomic():
            compression_schedule(session_id=session.pk, reason="Compress now", force=True)
        text = "Compressing…"
    return render(request, "chat/_progress.html", {"text": text})


@login_required
@require_GET
def timeline(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_viewer(user=request.user, session_id=session_id)
    start = compute_reliability(
        parameter_size_b=session.model_parameter_size_b, compression_count=0, checkpoints=[]
    ).score
    points = [(session.created_at, start), *reliability_history(session=session)]
    events_page = _newest_page(session_events(session=session), request.GET.get("events_page", ""))
    checkpoints_page = _newest_page(session_checkpoints(session=session), request.GET.get("checkpoints_page", ""))
    return render(
        request,
        "chat/timeline.html",
        {
            "session": session,
            "events": [(event, describe_event(event.type, event.payload)) for event in events_page],
            "events_page": events_page,
            "checkpoints": checkpoints_page,
            "checkpoints_page": checkpoints_page,
            "chart": reliability_chart([score for _, score in points]),
            "recalls": session_events(session=session).filter(type=EventType.RECALLED).count(),
            **context_panel(session),
        },
    )


# Events and checkpoints per timeline page: a long session has thousands of each.
TIMELINE_PAGE = 50


def _newest_page(rows: QuerySet[Any], number: str) -> Page[Any]:
    """One page of ``rows`` (oldest first); the newest page unless ``number`` names another
    (anything that is not a page number is the newest page too)."""
    paginator = Paginator(rows, TIMELINE_PAGE)
    wanted = int(number) if number.isascii() and number.isdigit() and len(number) < 10 else paginator.num_pages
    return paginator.get_page(wanted)
