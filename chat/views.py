"""Pages of the dashboard. Thin: parse, check who may see what, call a service, render."""

from __future__ import annotations

import contextlib
from itertools import groupby
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from chat.export import session_file, sessions_zip_response
from chat.forms import RenameForm, SessionForm
from chat.models import Session
from chat.selectors import (
    HISTORY_WINDOW,
    session_for_owner,
    session_for_viewer,
    session_history,
    sessions_for_user,
)
from chat.services import session_create, session_delete, session_update
from contextmgr.core.reliability import ReliabilityLevel, low_reliability_warning
from contextmgr.llm import LLMError, get_gateway
from contextmgr.llm.gateway import BackendStatus
from contextmgr.selectors import ContextReport, context_meter, session_context, session_prompt
from contextmgr.services.goals import goal_create


def viewable(request: HttpRequest, session_id: UUID) -> Session:
    session = session_for_viewer(user=request.user, session_id=session_id)
    if session is None:
        raise Http404("No such session.")
    return session


def owned(request: HttpRequest, session_id: UUID) -> Session:
    session = session_for_owner(user=request.user, session_id=session_id)
    if session is None:
        raise Http404("No such session.")
    return session


def backend_status() -> BackendStatus:
    return async_to_sync(get_gateway().status)()


def _model_names() -> list[str]:
    try:
        return [info.name for info in async_to_sync(get_gateway().list_models)()]
    except LLMError:
        return []


def context_panel(session: Session, reading: ContextReport | None = None) -> dict[str, Any]:
    """What the meter, the reliability badge and the warning panel show: one reading of the
    budget and the reliability serves them all (it is shown after every reply); ``reading``:
    see ``session_context``."""
    report = session_context(session=session, reading=reading)
    reliability = report.reliability
    warning = low_reliability_warning(
        model=session.model,
        parameter_size_b=session.model_parameter_size_b,
        compression_count=report.compression_count,
    )
    return {
        "meter": context_meter(session=session, budget=report.budget),
        "context_line": report.display,
        "exact": report.messages_exact,
        "reliability": reliability,
        "warning": warning,
        # Before any compression nothing is compressed to distrust, whatever the model's size.
        "reliability_low": report.compression_count > 0
        and reliability.level in (ReliabilityLevel.LOW, ReliabilityLevel.CRITICAL),
    }


@login_required
@require_GET
def session_list(request: HttpRequest) -> HttpResponse:
    form = SessionForm(models=_model_names())
    return _list_page(request, form)


def _list_page(request: HttpRequest, form: SessionForm, status: int = 200) -> HttpResponse:
    rows = []
    for session in sessions_for_user(user=request.user):
        panel = context_panel(session)
        rows.append({"session": session, **panel})
    return render(
        request,
        "chat/session_list.html",
        {"rows": rows, "form": form, "backend": backend_status()},
        status=status,
    )


@login_required
@require_POST
def session_new(request: HttpRequest) -> HttpResponse:
    models = _model_names()
    form = SessionForm(request.POST, models=models)
    if not form.is_valid():
        return _list_page(request, form, status=422)
    data = form.cleaned_data
    context_limit = None
    with contextlib.suppress(LLMError):  # unknown length: the tier table alone decides
        context_limit = async_to_sync(get_gateway().model_info)(data["model"]).context_length
    try:
        with transaction.atomic():
            session = session_create(
                owner=request.user,
                model=data["model"],
                context_size=data["context_size"],
                title=data["title"],
                system_prompt=data["system_prompt"],
                context_limit=context_limit,
            )
            if data["goal"].strip():
                goal_create(session=session, description=data["goal"])
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
        return _list_page(request, form, status=422)
    return redirect("chat:chat", session_id=session.pk)


@login_required
@require_POST
def session_rename(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = owned(request, session_id)
    form = RenameForm(request.POST)
    if form.is_valid():
        try:
            session = session_update(session=session, title=form.cleaned_data["title"])
        except ValidationError as exc:
            form.add_error("title", exc.messages)
    status = 200 if form.is_valid() and not form.errors else 422
    template = "chat/_list_title.html" if request.POST.get("where") == "list" else "chat/_title.html"
    return render(request, template, {"session": session, "form": form}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def session_remove(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = owned(request, session_id)
    if request.method == "POST":
        session_delete(session=session)
        return redirect("chat:session_list")
    return render(request, "chat/session_delete.html", {"session": session, "messages_count": session.messages.count()})


@login_required
@require_GET
def session_export(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = viewable(request, session_id)
    response = JsonResponse(session_file(session=session), json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="ollm-session-{session.pk}.json"'
    return response


@login_required
@require_POST
def sessions_export_selected(request: HttpRequest) -> HttpResponse:
    """A zip of the OLLM session files of the sessions ticked in the list (only the user's own)."""
    ids = []
    for value in request.POST.getlist("session"):
        with contextlib.suppress(ValueError):
            ids.append(UUID(value))
    sessions = list(sessions_for_user(user=request.user).filter(pk__in=ids).order_by("created_at"))
    if not sessions:
        return HttpResponse("Select at least one of your sessions to export.", status=400, content_type="text/plain")
    return sessions_zip_response(sessions=sessions, name="ollm-sessions")


@login_required
@require_GET
def session_full_history(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """Every message in order with its compression state and covering checkpoint; read-only, printable."""
    session = viewable(request, session_id)
    return render(
        request,
        "chat/full_history.html",
        {"session": session, "messages": session_history(session=session)},
    )


def _message_id(value: str) -> int | None:
    """A message id from the query string; anything else (², 5,000 digits) is no id."""
    if value.isascii() and value.isdigit() and len(value) < 19:
        return int(value)
    return None


@login_required
@require_GET
def chat_page(request: HttpRequest, session_id: UUID) -> HttpResponse:
    from contextmgr.views import goals_context, settings_context, snapshots_context

    session = viewable(request, session_id)
    return render(
        request,
        "chat/chat.html",
        {
            "session": session,
            **history_groups(
                session,
                around=_message_id(request.GET.get("around", "")),
                before=_message_id(request.GET.get("before", "")),
            ),
            "can_write": session.owner_id == request.user.pk,
            "backend": backend_status(),
            "rename_form": RenameForm(initial={"title": session.title}),
            **context_panel(session),
            **goals_context(session),
            **snapshots_context(session),
            **settings_context(session),
        },
    )


@login_required
@require_GET
def context_meter_partial(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = viewable(request, session_id)
    return render(request, "chat/_meter.html", {"session": session, **context_panel(session)})


@login_required
@require_GET
def context_window(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = viewable(request, session_id)
    prompt = session_prompt(session=session, gateway=get_gateway())
    return render(request, "chat/context.html", {"session": session, "prompt": prompt, **context_panel(session)})


CHECKPOINT_TEXTS = tuple(
    f"compressed_into__{name}" for name in ("summary", "facts", "key_decisions", "files_modified", "next_steps")
)


def history_groups(session: Session, *, around: int | None = None, before: int | None = None) -> dict[str, Any]:
    """The latest HISTORY_WINDOW messages; with ``before`` (a position) the window of messages just
    before it; with ``around`` (a message id) the window centred on that message. Consecutive
    messages compressed into the same checkpoint are grouped under its marker; the rest is a
    link away ("earlier", "show the latest"), on the full history page and in the export."""
    total = session.messages.count()
    end = total
    if before is not None and 1 < before <= total:
        end = before - 1  # positions are 1-based and gapless: position p is row p - 1
    start = max(end - HISTORY_WINDOW, 0)
    if around is not None:
        position = session.messages.filter(pk=around).values_list("position", flat=True).first()
        if position is not None and position <= start:
            start = max(position - HISTORY_WINDOW // 2, 0)
            end = min(start + HISTORY_WINDOW, total)
    # The group markers need only a checkpoint's number, level and merge; its texts and facts
    # (JSON, large after many compressions) stay in the database.
    messages = list(session_history(session=session).defer(*CHECKPOINT_TEXTS)[start:end])
    groups = [
        (checkpoint_id and rows[0].compressed_into, rows)
        for checkpoint_id, rows in (
            (key, list(group)) for key, group in groupby(messages, key=lambda m: m.compressed_into_id)
        )
    ]
    return {
        "groups": groups,
        "hidden_count": start,
        "first_position": start + 1,
        "later_count": total - end,
    }


def chat_fragments(kind: str, session_id: UUID, *, session: Session | None = None, **extra: Any) -> str:
    """HTML frames for the chat socket, swapped into the page out of band by id.

    ``turn_start``: the stored user message and an empty reply; ``turn_done``: the stored
    reply in place of the streamed one (the whole history instead with ``with_history``)
    and the panels, from the turn's ``reading`` of the context while it holds, the goals panel
    only when ``goals_changed``; ``turn_stopped`` and ``history``: the history and panels again;
    ``event``: a context event's line, and the history unless a reply is streaming.
    ``session``: the session as the caller has just read it (it is read here otherwise).
    """
    from contextmgr.presentation import describe_event
    from contextmgr.views import goals_context, snapshots_context

    if session is None:
        session = Session.objects.get(pk=session_id)
    context: dict[str, Any] = {"session": session, "kind": kind, "can_write": True, "oob": True, **extra}
    with_history = kind in ("turn_stopped", "history") or (
        kind in ("turn_done", "event") and bool(extra.get("with_history"))
    )
    if kind != "turn_start":
        context.update(context_panel(session, extra.get("reading")))
        # The goals panel changes in a turn through the reply's markers, or from elsewhere meanwhile.
        context["with_goals"] = kind != "turn_done" or with_history or bool(extra.get("goals_changed"))
        if context["with_goals"]:
            context.update(goals_context(session))
    if with_history:
        context.update(history_groups(session))
        context["with_history"] = True
    if kind == "event":
        event = extra["event"]
        context["event_line"] = describe_event(event["type"], event["payload"])
        context.update(snapshots_context(session))
    return render_to_string("chat/ws/_fragments.html", context)
