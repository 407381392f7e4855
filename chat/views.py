from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from chat.selectors import sessions_for_user
from contextmgr.selectors import session_context_line


@login_required
def session_list(request: HttpRequest) -> HttpResponse:
    rows = [(session, session_context_line(session=session)) for session in sessions_for_user(user=request.user)]
    return render(request, "chat/session_list.html", {"rows": rows})
