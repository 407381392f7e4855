"""Conversations an outside client drives through the Ollama or OpenAI endpoint (chat.drop_in).

Such a client sends its whole history on every call. The request is mapped to a session of the
token's owner (``conversation_resolve``), its new message goes through the same turn as the chat
page's (``conversation_reply``), and the model is sent the managed prompt (system prompt, goal
block, checkpoints, active messages), never the client's raw history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import transaction

from chat.models import DEFAULT_CONTEXT_SIZE, Message, Session
from chat.selectors import model_availability, model_facts, session_for_client_history, session_for_owner
from chat.services import NewMessage, message_create_many, session_client_seen, session_start, session_update
from chat.turn import OnDelta, TurnOutcome, message_counter, turn_retry, turn_run
from contextmgr.core.client_history import ClientRequest, context_size_for
from contextmgr.llm import Gateway, get_gateway
from contextmgr.resources import context_profiles


@dataclass(frozen=True)
class Conversation:
    """The session a request continues or starts. ``created``: started by this request (with the
    request's earlier messages as its history); ``retry``: its new message is the session's last,
    left unanswered (the client repeats a call that failed), so it is answered, not stored again."""

    session: Session
    request: ClientRequest
    created: bool
    retry: bool


def _unanswered(session: Session, content: str) -> bool:
    last = session.messages.order_by("-position").first()
    return (
        last is not None
        and last.role == Message.Role.USER
        and not last.excluded_from_context
        and last.content.strip() == content.strip()
    )


def conversation_resolve(
    *,
    owner: Any,
    model: str,
    request: ClientRequest,
    client: str,
    num_ctx: int | None = None,
    session_id: UUID | None = None,
    gateway: Gateway | None = None,
) -> Conversation:
    """The session of ``owner`` that ``request`` continues, or a new one.

    With ``session_id`` (the X-OLLM-Session header) that session (Http404 unless the owner's) is
    continued when the request resends the history its client holds, or sends only its new message;
    without it, the owner's session whose client holds the request's earlier messages is. Any other
    request (a first message, even a repeated one; a history the client edited or trimmed) starts a new session, titled
    from its first message, of ``num_ctx``'s size (``context_size_for``), whose history is the
    request's earlier messages: a diverged client branches, it never rewrites a session.
    A continued session switches to ``model`` when the client names another (``session_update``).
    Raises a ValidationError (on ``model``) for a model no backend serves, before anything is stored.
    """
    session = None
    if session_id is not None:
        named = session_for_owner(user=owner, session_id=session_id)
        if not request.earlier or named.client_digest == request.earlier_digest:
            session = named
    elif request.earlier:
        session = session_for_client_history(user=owner, digest=request.earlier_digest)
    if session is None or model != session.model:
        _refuse_unserved(model, gateway)
    if session is not None:
        if model != session.model:
            session = session_update(session=session, model=model)
        return Conversation(session, request, created=False, retry=_unanswered(session, request.new_message))
    return Conversation(
        _session_from_request(
            owner=owner, model=model, request=request, client=client, num_ctx=num_ctx, gateway=gateway
        ),
        request,
        created=True,
        retry=False,
    )


def _refuse_unserved(model: str, gateway: Gateway | None) -> None:
    """What Ollama answers for a model it does not have, before anything is stored; the served list is
    asked again before refusing (a model pulled a moment ago). Nothing is refused when no backend
    answers at all: the turn's error says what is down."""
    if (
        model_availability(model=model, gateway=gateway).available is False
        and model_availability(model=model, gateway=gateway, refresh=True).available is False
    ):
        raise ValidationError({"model": f"model '{model}' not found"})


def _session_from_request(
    *, owner: Any, model: str, request: ClientRequest, client: str, num_ctx: int | None, gateway: Gateway | None
) -> Session:
    facts = model_facts(model=model)  # asked before the transaction: it may wait on the network
    sizes = [(profile.size, profile.ollama_context_size) for profile in context_profiles()]
    counts = message_counter(gateway or get_gateway(), model).count_all([m.content for m in request.earlier])
    with transaction.atomic():
        session = session_start(
            owner=owner,
            model=model,
            context_size=context_size_for(num_ctx, sizes, DEFAULT_CONTEXT_SIZE),
            title=request.title,
            system_prompt=request.system_prompt,
            facts=facts,
            client=client,
        )
        # The client holds the earlier messages already: a repeat of this request (a retry after an
        # error) continues this session, and answers its stored message rather than storing it again.
        session_client_seen(session=session, digest=request.earlier_digest)
        if request.earlier:
            message_create_many(
                session=session,
                messages=[
                    NewMessage(role=message.role, content=message.content, token_count=count)
                    for message, count in zip(request.earlier, counts, strict=True)
                ],
            )
    return session


async def conversation_reply(
    *, conversation: Conversation, gateway: Gateway | None = None, on_delta: OnDelta | None = None
) -> TurnOutcome:
    """Answer the request's new message as the chat page does (``turn_run``: stored first, then the
    reply from the managed prompt; ``turn_retry`` when it is stored already), then remember the
    history the client holds once it has the reply. Raises what the turn raises."""
    session_id = conversation.session.pk
    if conversation.retry:
        outcome = await turn_retry(session_id=session_id, gateway=gateway, on_delta=on_delta)
    else:
        outcome = await turn_run(
            session_id=session_id, content=conversation.request.new_message, gateway=gateway, on_delta=on_delta
        )
    digest = conversation.request.digest_with_reply(outcome.assistant_message.content)
    await sync_to_async(session_client_seen)(session=conversation.session, digest=digest)
    return outcome
