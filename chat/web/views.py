"""Pages of the dashboard. Thin: parse, check who may see what, call a service, render."""

from __future__ import annotations

import contextlib
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from chat.selectors.prompt import session_prompt
from chat.selectors.recall import DRAFT_MAX_CHARS, session_prompt_for
from chat.selectors.sessions import (
    backend_status,
    chat_defaults_for,
    message_of_session,
    model_availability,
    model_names,
    session_branches,
    session_for_owner,
    session_for_viewer,
    session_history,
    sessions_for_user,
)
from chat.services.attachments import ATTACHMENT_ACCEPT, MAX_ATTACHMENT_BYTES
from chat.services.defaults import chat_defaults_update
from chat.services.events import history_publish
from chat.services.files import session_archive, session_file, sessions_zip_response
from chat.services.revisions import message_version_choose
from chat.services.sessions import (
    session_archived_set,
    session_branch,
    session_continue,
    session_delete,
    session_start,
    session_update,
)
from chat.web.forms import ChatDefaultsForm, RenameForm, SessionForm
from chat.web.fragments import history_groups
from chat.web.live import reply_in_flight
from chat.web.panels import (
    PANEL_SAMPLING,
    context_panel,
    goals_context,
    session_list_rows,
    settings_context,
    sidebar_context,
    snapshots_context,
)


@login_required
@require_GET
def session_list(request: HttpRequest) -> HttpResponse:
    return _list_page(request, _new_session_form(request))


def _new_session_form(request: HttpRequest) -> SessionForm:
    """The sessions list's new-session form, filled in with the user's defaults (the account page)."""
    defaults = chat_defaults_for(user=request.user)
    initial = {"context_size": defaults.context_size, "system_prompt": defaults.system_prompt}
    if defaults.model:
        initial["model"] = defaults.model
    return SessionForm(models=model_names(), initial=initial)


def _list_page(request: HttpRequest, form: SessionForm, status: int = 200, export_error: str = "") -> HttpResponse:
    """The sessions list: those not archived, or (``?archived=1``) the archived ones."""
    archived = request.GET.get("archived") == "1"
    sessions = sessions_for_user(user=request.user).select_related("parent")
    listed = sessions.filter(archived_at__isnull=not archived)
    rows = session_list_rows(list(listed))
    return render(
        request,
        "chat/session_list.html",
        {
            "rows": rows,
            "form": form,
            "backend": backend_status(),
            "export_error": export_error,
            "archived": archived,
            "archived_count": sessions.filter(archived_at__isnull=False).count(),
        },
        status=status,
    )


@login_required
@require_POST
def session_new_chat(request: HttpRequest) -> HttpResponse:
    """New chat (the sidebar's button): a session with the user's defaults, titled once it has its first reply."""
    defaults = chat_defaults_for(user=request.user)
    models = model_names()
    model = defaults.model if defaults.model in models or not models else models[0]
    try:
        session = session_start(
            owner=request.user,
            model=model,
            context_size=defaults.context_size,
            system_prompt=defaults.system_prompt,
            auto_title=True,
        )
    except ValidationError as exc:
        form = _new_session_form(request)
        form.add_error(None, " ".join(exc.messages))
        return _list_page(request, form, status=422)
    return redirect("chat:chat", session_id=session.pk)


@login_required
@require_POST
def session_archived(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """Archive the session (``archived=1``: hidden from the lists) or bring it back; from the sidebar's
    archived view (``where=sidebar``) that view again, else the session's page."""
    session = session_for_owner(user=request.user, session_id=session_id)
    session = session_archived_set(session=session, archived=request.POST.get("archived") == "1")
    if request.POST.get("where") == "sidebar":
        current = _uuid(request.POST.get("current", ""))
        return render(request, "chat/_sidebar_list.html", sidebar_context(request.user, current, archived=True))
    return redirect("chat:chat", session_id=session.pk)


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None


@login_required
@require_GET
def sidebar_list(request: HttpRequest) -> HttpResponse:
    """The sidebar's list of sessions (``?archived=1``: the archived ones), ``current`` marked."""
    current = _uuid(request.GET.get("current", ""))
    archived = request.GET.get("archived") == "1"
    context = {**sidebar_context(request.user, current, archived=archived), "sidebar_refresh": True}
    return render(request, "chat/_sidebar_list.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def account(request: HttpRequest) -> HttpResponse:
    """The account page: what a new chat starts with (model, context size, custom instructions)."""
    defaults = chat_defaults_for(user=request.user)
    models = model_names()
    saved = False
    status = 200
    if request.method == "POST":
        form = ChatDefaultsForm(request.POST, models=models)
        if form.is_valid():
            try:
                chat_defaults_update(owner=request.user, **form.cleaned_data)
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                saved = True
        status = 200 if saved else 422
    else:
        initial = {
            "model": defaults.model,
            "context_size": defaults.context_size,
            "system_prompt": defaults.system_prompt,
        }
        form = ChatDefaultsForm(models=models, initial=initial)
    return render(request, "chat/account.html", {"form": form, "saved": saved}, status=status)


@login_required
@require_POST
def session_new(request: HttpRequest) -> HttpResponse:
    models = model_names()
    form = SessionForm(request.POST, models=models)
    if not form.is_valid():
        return _list_page(request, form, status=422)
    data = form.cleaned_data
    try:
        session = session_start(
            owner=request.user,
            model=data["model"],
            context_size=data["context_size"],
            title=data["title"],
            system_prompt=data["system_prompt"],
            goal=data["goal"],
            auto_title=True,
        )
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
        return _list_page(request, form, status=422)
    return redirect("chat:chat", session_id=session.pk)


@login_required
@require_POST
def session_rename(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    form = RenameForm(request.POST)
    if form.is_valid():
        try:
            session = session_update(session=session, title=form.cleaned_data["title"])
        except ValidationError as exc:
            form.add_error("title", exc.messages)
    status = 200 if form.is_valid() and not form.errors else 422
    template = "chat/_list_title.html" if request.POST.get("where") == "list" else "chat/_title.html"
    context = {"session": session, "form": form, "renamed": status == 200}
    return render(request, template, context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def session_remove(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    if request.method == "POST":
        session_delete(session=session)
        return redirect("chat:session_list")
    return render(request, "chat/session_delete.html", {"session": session, "messages_count": session.messages.count()})


@login_required
@require_GET
def session_export(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_viewer(user=request.user, session_id=session_id)
    response = JsonResponse(session_file(session=session), json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="ollm-session-{session.pk}.json"'
    return response


@login_required
@require_GET
def session_archive_download(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """The whole session (chat.services.files.archive), for its owner only: the import rebuilds it identically."""
    session = session_for_owner(user=request.user, session_id=session_id)
    response = JsonResponse(session_archive(session=session), json_dumps_params={"ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="ollm-archive-{session.pk}.json"'
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
        form = _new_session_form(request)
        return _list_page(request, form, status=400, export_error="Tick at least one of your sessions to export.")
    return sessions_zip_response(sessions=sessions, name="ollm-sessions")


@login_required
@require_GET
def session_full_history(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """Every message in order with its compression state and covering checkpoint; read-only, printable."""
    session = session_for_viewer(user=request.user, session_id=session_id)
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
    session = session_for_viewer(user=request.user, session_id=session_id)
    # A reply streaming in this process is shown as far as it has come (the socket brings the
    # rest); one in another process, by the socket's catch-up once it connects.
    live = reply_in_flight(session.pk)
    live = live if live is not None and live.stored else None
    return render(
        request,
        "chat/chat.html",
        {
            "session": session,
            **history_groups(
                session,
                around=_message_id(request.GET.get("around", "")),
                before=_message_id(request.GET.get("before", "")),
                answering=live is not None,
            ),
            "live": live,
            "can_write": session.owner_id == request.user.pk,
            "max_attachment_bytes": MAX_ATTACHMENT_BYTES,
            "attachment_accept": ATTACHMENT_ACCEPT,
            "branches": session_branches(session=session),
            "backend": backend_status(),
            "model_status": model_availability(model=session.model, with_reason=True),
            "rename_form": RenameForm(initial={"title": session.title}),
            **(sidebar_context(request.user, session.pk) if session.owner_id == request.user.pk else {}),
            **context_panel(session),
            **goals_context(session),
            **snapshots_context(session),
            **settings_context(session),
        },
    )


@login_required
@require_GET
def context_meter_partial(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_viewer(user=request.user, session_id=session_id)
    return render(request, "chat/_meter.html", {"session": session, **context_panel(session)})


@login_required
@require_GET
def context_window(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """The next prompt block by block; with ``?draft=``, the prompt the next turn would send for that message,
    with what the history recalls for it."""
    session = session_for_viewer(user=request.user, session_id=session_id)
    draft = request.GET.get("draft", "")
    error = f"A draft to preview may be at most {DRAFT_MAX_CHARS:,} characters." if len(draft) > DRAFT_MAX_CHARS else ""
    prompt = (
        session_prompt_for(session=session, draft=draft)
        if draft.strip() and not error
        else session_prompt(session=session)
    )
    return render(
        request,
        "chat/context.html",
        {"session": session, "prompt": prompt, "draft": draft, "draft_error": error, **context_panel(session)},
    )


def _number(request: HttpRequest, name: str) -> int | float | str:
    """A number from the form; text that is not one goes through so validation can name it."""
    raw = request.POST.get(name, "").strip()
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            continue
    return raw


@login_required
@require_POST
def session_settings(request: HttpRequest, session_id: UUID) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    values = {
        "compression": {
            "enabled": request.POST.get("compression_enabled") == "1",
            "strategy": request.POST.get("strategy", ""),
            # Left empty, a token value follows the context size (not stored).
            **{
                name: _number(request, name)
                for name in ("preserve_recent", "summary_max_tokens")
                if request.POST.get(name, "").strip()
            },
        },
        "snapshots": {
            "enabled": request.POST.get("snapshots_enabled") == "1",
            "auto_create": request.POST.get("auto_create") == "1",
            "auto_threshold": _number(request, "auto_threshold"),
        },
    }
    stored = session.settings.get("sampling") if isinstance(session.settings, dict) else None
    sampling = {
        # What the panel does not show (set through the API) stays; a field left empty follows the default.
        **{name: value for name, value in (stored or {}).items() if name not in PANEL_SAMPLING},
        **{name: _number(request, name) for name in PANEL_SAMPLING if request.POST.get(name, "").strip()},
    }
    if sampling:
        values["sampling"] = sampling
    error = ""
    try:
        session = session_update(session=session, settings=values, summary_model=request.POST.get("summary_model", ""))
    except ValidationError as exc:
        error = " ".join(exc.messages)
        session.refresh_from_db()
    return render(
        request,
        "chat/_settings_response.html",
        {
            "session": session,
            "can_write": True,
            "settings_error": error,
            "settings_saved": not error,
            **settings_context(session),
            **context_panel(session),
            **snapshots_context(session),  # its wording follows snapshots.enabled and auto_create
        },
        status=422 if error else 200,
    )


@login_required
@require_POST
def session_continue_view(request: HttpRequest, session_id: UUID) -> HttpResponse:
    successor = session_continue(session=session_for_owner(user=request.user, session_id=session_id))
    if request.headers.get("HX-Request"):
        return HttpResponseClientRedirect(reverse("chat:chat", args=[successor.pk]))
    return redirect("chat:chat", session_id=successor.pk)


@login_required
@require_POST
def message_branch(request: HttpRequest, session_id: UUID, message_id: int) -> HttpResponse:
    session = session_for_owner(user=request.user, session_id=session_id)
    branch = session_branch(session=session, at_message=message_of_session(session=session, message_id=message_id))
    if request.headers.get("HX-Request"):
        return HttpResponseClientRedirect(reverse("chat:chat", args=[branch.pk]))
    return redirect("chat:chat", session_id=branch.pk)


@login_required
@require_POST
def session_model(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """Switch the session's model (``session_update``), from the banner of a session whose model is
    not available; the page is shown again with the new model."""
    session = session_for_owner(user=request.user, session_id=session_id)
    try:
        session_update(session=session, model=request.POST.get("model", ""))
    except ValidationError as exc:
        return render(
            request,
            "chat/_model_unavailable.html",
            {
                "session": session,
                "can_write": True,
                "model_status": model_availability(model=session.model, refresh=True, with_reason=True),
                "model_error": " ".join(exc.messages),
            },
            status=422,
        )
    if request.headers.get("HX-Request"):
        return HttpResponseClientRedirect(reverse("chat:chat", args=[session.pk]))
    return redirect("chat:chat", session_id=session.pk)


@login_required
@require_POST
def message_version(request: HttpRequest, session_id: UUID, message_id: int) -> HttpResponse:
    """Make this version of a message the one in the context (message_version_choose); the history
    again, here and on the session's other pages."""
    session = session_for_owner(user=request.user, session_id=session_id)
    message = message_of_session(session=session, message_id=message_id)
    error = ""
    try:
        message_version_choose(session=session, message=message)
    except ValidationError as exc:
        error = " ".join(exc.messages)
    else:
        history_publish(session_id=session.pk)
    if not request.headers.get("HX-Request"):
        return redirect("chat:chat", session_id=session.pk)
    session.refresh_from_db()
    return render(
        request,
        "chat/_versions_response.html",
        {
            "session": session,
            "can_write": True,
            "version_error": error,
            **history_groups(session),
            **context_panel(session),
        },
    )  # a refusal too is shown in place of the history (htmx swaps no 4xx answer)
