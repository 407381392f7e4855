"""The chat page's model switch (issue 47, item 10): parse, check the owner, call the service, go back to the
chat page, which shows the new model and the context as recounted for it."""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from chat.selectors.sessions import session_for_owner
from chat.services.model_switch import session_model_switch


@login_required
@require_POST
def session_model_switch_view(request: HttpRequest, session_id: UUID) -> HttpResponse:
    """Switch the session's model to the one chosen among those served here; an error says why not."""
    session = session_for_owner(user=request.user, session_id=session_id)
    before = session.model
    try:
        session = session_model_switch(session=session, model=request.POST.get("model", ""))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(
            request,
            f"Switched from {before} to {session.model}: the context is recounted for its tokenizer and its "
            f"window of {session.max_tokens:,} tokens.",
        )
    return redirect("chat:chat", session_id=session.pk)
