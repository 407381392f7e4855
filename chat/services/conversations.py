"""Conversations an outside client drives through the Ollama or OpenAI endpoint (chat.dropin.common).

Such a client sends its whole history on every call. The request is mapped to a session of the
token's owner (``conversation_resolve``), its new message goes through the same turn as the chat
page's (``conversation_answer``; ``conversation_reply`` when the answer streams), and the model is
sent the managed prompt (system prompt, goal block, checkpoints, active messages), never the
client's raw history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db import transaction

from chat.gateway import get_gateway
from chat.models import DEFAULT_CONTEXT_SIZE, Message, Session
from chat.selectors.sessions import (
    model_availability,
    model_facts,
    session_for_client_history,
    session_for_owner,
    session_fork_point,
    session_holds_history,
    stopped_replies,
)
from chat.services.counting import message_counter
from chat.services.events import history_publish
from chat.services.messages import NewMessage, ToolResult, message_create_many
from chat.services.revisions import message_cut
from chat.services.sampling import sampling_requested
from chat.services.sessions import (
    session_branch,
    session_client_claim,
    session_client_seen,
    session_start,
    session_update,
)
from chat.services.turn import (
    Hear,
    OnDelta,
    TurnContinue,
    TurnOutcome,
    TurnRetry,
    TurnSend,
    TurnStop,
    TurnStopped,
    TurnToolResults,
    TurnVariant,
    turn_in_thread,
    turn_listener,
    turn_run,
)
from engine.core.client_history import ClientRequest, ClientToolCall, context_size_for, history_entries
from engine.core.tokens import TokenCount
from engine.llm import Gateway, Sampling
from engine.llm.types import SERVER_DEFAULTS, ContextOverflow
from engine.resources import context_profiles


@dataclass(frozen=True)
class Conversation:
    """The session a request continues or starts. ``created``: started by this request (with the
    request's earlier messages as its history); ``retry``: its new message is the session's last,
    left unanswered (the client repeats a call that failed), so it is answered, not stored again."""

    session: Session
    request: ClientRequest
    created: bool
    retry: bool


def _unanswered(session: Session, request: ClientRequest) -> bool:
    """The session's last message is the request's, without a reply: the user's message, or a result of
    the request's tool results; left unanswered by a failure, or left out of the context as too large (a
    repeat is refused again, not stored again)."""
    last = session.messages.order_by("-position").first()
    if last is None:
        return False
    if request.tool_results:
        return last.role == Message.Role.TOOL and any(
            last.content and last.content.strip() == result.content.strip() for result in request.tool_results
        )
    return last.role == Message.Role.USER and last.content.strip() == request.new_message.strip()


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
    continued when the request resends the history its client holds or the session's whole stored history
    (read from the REST API, its page's turns included), or sends only its new message;
    without it, the owner's session whose client holds the request's earlier messages is, or the one
    that stored this very request's message without answering it (the request repeated after an error).
    The session is claimed for the request (``session_client_claim``): a second request matching it
    while the first is answered branches. A history the client edited or regenerated (or that
    another request took) branches the session that shares the most of it (``session_fork_point``,
    only ``session_id``'s when named): ``session_branch`` at the last shared message keeps the goal,
    decisions and checkpoints it had there, then the request's other earlier messages follow. Any
    other request (a first message; a history no session shares the first message of) starts a new
    session, titled from its first message, of ``num_ctx``'s size (``context_size_for``), whose
    history is the request's earlier messages: a diverged client branches, it never rewrites a session.
    A continued session switches to ``model`` when the client names another (``session_update``).
    Raises a ValidationError (on ``model``) for a model no backend serves, before anything is stored.
    """
    session, matched = _continued(owner, request, session_id)
    stopped = _stopped(owner, request, session_id) if session is None else None
    if stopped is not None:
        session, matched = stopped[0].session, stopped[0].session.client_digest
    if session is None or model != session.model:
        model_refuse_unserved(model, gateway)
    if session is not None and model != session.model:
        session = session_update(session=session, model=model)
    if session is not None and matched is not None and not session_client_claim(session=session, expected=matched):
        session = None  # another request with the same history took it a moment ago: this one branches
    if session is None:
        session = _branch_from_request(
            owner=owner, model=model, request=request, client=client, session_id=session_id, gateway=gateway
        ) or _session_from_request(
            owner=owner, model=model, request=request, client=client, num_ctx=num_ctx, gateway=gateway
        )
        return Conversation(session, request, created=True, retry=False)
    if stopped is not None:
        reply, held = stopped
        message_cut(message=reply, content=held, token_count=_counted(held, session.model, gateway))
    return Conversation(session, request, created=False, retry=_unanswered(session, request))


def _continued(owner: Any, request: ClientRequest, session_id: UUID | None) -> tuple[Session | None, str | None]:
    """The session ``request`` continues, and the digest it matched (None: a named session the request
    only adds its message to, whatever its client held)."""
    if session_id is not None:
        named = session_for_owner(user=owner, session_id=session_id)
        if not request.earlier:
            return named, None
        if named.client_digest in (request.earlier_digest, request.pending_digest) or _resends_stored(named, request):
            return named, named.client_digest
        return None, None
    # A first message is looked up only as a repeat of one left unanswered: every other starts a session.
    digests = [request.pending_digest, *([request.earlier_digest] if request.history else [])]
    found = session_for_client_history(user=owner, digests=digests)
    return (found, found.client_digest) if found is not None else (None, None)


def _resends_stored(session: Session, request: ClientRequest) -> bool:
    """The request resends the named session's whole history, as its REST API or page shows it (turns its
    client did not take part in included), with or without its new message stored unanswered."""
    sent = [(m.role, m.content) for m in request.history]
    held = [*sent, *((m.role, m.content) for m in request.added)]
    return any(
        session_holds_history(session=session, system_prompt=request.system_prompt, history=history)
        for history in (sent, held)
    )


def _stopped(owner: Any, request: ClientRequest, session_id: UUID | None) -> tuple[Message, str] | None:
    """The stopped reply of ``owner``'s (in session ``session_id``, if named) that the client holds less
    of than was stored (it drops what was still on its way when it stops), and the part it holds: the
    reply the client holds last is a prefix of it, and the rest of its history is the session's."""
    found = request.stopped_reply()
    if found is None:
        return None
    before, held = found
    for reply in stopped_replies(user=owner, session_id=session_id):
        same_history = reply.session.client_digest == before.digest_with_reply(reply.content)
        if same_history and reply.content.strip().startswith(held.strip()):
            return reply, held
    return None


def _counted(text: str, model: str, gateway: Gateway | None) -> TokenCount:
    return message_counter(gateway or get_gateway(), model).count(text)


def model_refuse_unserved(model: str, gateway: Gateway | None) -> None:
    """What Ollama answers for a model it does not have, before anything is stored; the served list is
    asked again before refusing (a model pulled a moment ago). Nothing is refused when no backend
    answers at all: the turn's error says what is down."""
    if (
        model_availability(model=model, gateway=gateway).available is False
        and model_availability(model=model, gateway=gateway, refresh=True).available is False
    ):
        raise ValidationError({"model": f"model '{model}' not found"})


def _branch_from_request(
    *,
    owner: Any,
    model: str,
    request: ClientRequest,
    client: str,
    session_id: UUID | None,
    gateway: Gateway | None,
) -> Session | None:
    """The branch of the session the request's earlier messages diverge from, holding them; None when no
    session shares the first of them."""
    entries = history_entries(request.history)
    fork = session_fork_point(
        user=owner,
        system_prompt=request.system_prompt,
        history=[(entry.role, entry.content) for entry in entries],
        session_id=session_id,
    )
    if fork is None:
        return None
    rest = entries[fork.position :]
    counts = message_counter(gateway or get_gateway(), fork.session.model).count_all([e.content for e in rest])
    branch = session_branch(
        session=fork.session,
        at_message=fork,
        # A HistoryEntry's fields are NewMessage's of the same names.
        messages=[NewMessage(token_count=count, **asdict(e)) for e, count in zip(rest, counts, strict=True)],
        client=client,
        # The client edits or regenerates the conversation its user pinned goals to: they go on with it.
        goals_now=True,
    )
    # Asks the backend about the model, so outside the branch's transaction.
    return branch if model == branch.model else session_update(session=branch, model=model)


def _session_from_request(
    *, owner: Any, model: str, request: ClientRequest, client: str, num_ctx: int | None, gateway: Gateway | None
) -> Session:
    facts = model_facts(model=model)  # asked before the transaction: it may wait on the network
    sizes = [(profile.size, profile.ollama_context_size) for profile in context_profiles()]
    entries = history_entries(request.history)
    counts = message_counter(gateway or get_gateway(), model).count_all([entry.content for entry in entries])
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
        if entries:
            message_create_many(
                session=session,
                # A HistoryEntry's fields are NewMessage's of the same names.
                messages=[NewMessage(token_count=count, **asdict(e)) for e, count in zip(entries, counts, strict=True)],
            )
    return session


def conversation_answer(
    *,
    conversation: Conversation,
    sampling: Sampling = SERVER_DEFAULTS,
    gateway: Gateway | None = None,
    on_delta: Hear | None = None,
    tools: Sequence[dict[str, Any]] = (),
    max_tokens: int | None = None,
    stop: TurnStop | None = None,
) -> TurnOutcome:
    """Answer the request's new message (or its tool results) as the chat page does (``turn_run``: stored
    first, then the reply from the managed prompt; ``TurnRetry`` when it is stored already), then remember the history
    the client holds: with the reply, or with the part of it the client had when it went away, or
    without one (the same request repeated answers the stored message). Raises what the turn raises.
    ``sampling``: what the request sets of it, over the session's settings for this reply only; ``tools``:
    the tools the model may call (``turn_run``), whose calls the client holds with the reply; ``max_tokens``:
    the request's cap on the reply, under the session's (``turn_run``); ``stop``: the client went away.

    Precondition: the session was claimed for this request (``conversation_resolve``)."""
    request, session_id = conversation.request, conversation.session.pk
    heard: list[str] = []

    def hear(delta: str) -> None:
        heard.append(delta)
        if on_delta is not None:
            on_delta(delta)

    try:
        with sampling_requested(sampling):
            if conversation.retry and _left_out(session_id):
                raise ContextOverflow(
                    "Your message does not fit this session's context: it is kept in the history only. "
                    "Shorten it or choose a larger context size."
                )
            variant: TurnVariant = TurnRetry() if conversation.retry else TurnSend(request.new_message)
            if request.continues is not None:
                variant = TurnContinue()
            elif request.tool_results and not conversation.retry:
                variant = TurnToolResults(
                    tuple(ToolResult(m.content, m.tool_call_id, m.tool_name) for m in request.tool_results)
                )
            outcome: TurnOutcome | None = None
            try:
                outcome = turn_run(
                    session_id=session_id,
                    variant=variant,
                    gateway=gateway,
                    on_delta=hear,
                    tools=tools,
                    max_tokens=max_tokens,
                    stop=stop,
                )
            finally:
                # What the turn stored, the session's open pages show: appended after a reply to a new
                # message or a retried one (a continued reply, tool results filled in change messages
                # they show: the history anew).
                appended_after = None
                if outcome is not None and isinstance(variant, TurnSend | TurnRetry):
                    first_new = outcome.assistant_message if isinstance(variant, TurnRetry) else outcome.user_message
                    appended_after = first_new.position - 1
                history_publish(session_id=session_id, after_position=appended_after)
    except BaseException as exc:
        # A continued reply is the one the client held, and what the model added to it.
        partial = (request.continues or "") + "".join(heard)
        if isinstance(exc, TurnStopped) and "".join(heard).strip():
            # The client stopped the reply; the turn kept the part it had, as the client does.
            digest = request.digest_with_reply(partial)
        else:
            digest = _digest_without_reply(conversation)
        session_client_seen(session=conversation.session, digest=digest)
        raise
    reply = outcome.assistant_message
    calls = [ClientToolCall(c.id, c.name, c.arguments) for c in outcome.result.tool_calls]
    text = reply.content if reply.role == Message.Role.ASSISTANT else ""  # a reply of calls only has no text
    digest = request.digest_with_reply(text, calls)
    session_client_seen(session=conversation.session, digest=digest)
    return outcome


async def conversation_reply(
    *,
    conversation: Conversation,
    sampling: Sampling = SERVER_DEFAULTS,
    gateway: Gateway | None = None,
    on_delta: OnDelta | None = None,
    tools: Sequence[dict[str, Any]] = (),
    max_tokens: int | None = None,
) -> TurnOutcome:
    """``conversation_answer`` awaited, for a streaming answer (``turn_in_thread``): ``on_delta`` is a
    coroutine on the caller's loop; a client that goes away cancels it, which stops the turn (the part
    of the reply that came is kept, and the client is remembered holding it)."""
    loop = asyncio.get_running_loop()

    def work(stop: TurnStop) -> TurnOutcome:
        return conversation_answer(
            conversation=conversation,
            sampling=sampling,
            gateway=gateway,
            on_delta=turn_listener(loop=loop, listener=on_delta),
            tools=tools,
            max_tokens=max_tokens,
            stop=stop,
        )

    return await turn_in_thread(work=work, name=f"turn {conversation.session.pk}")


def _left_out(session_id: UUID) -> bool:
    last = Message.objects.filter(session_id=session_id).order_by("-position").first()
    return last is not None and last.excluded_from_context


def _digest_without_reply(conversation: Conversation) -> str:
    """After a turn that gave no reply: the session holds the request's message unanswered, or (refused
    before it was stored) only what came before it."""
    request = conversation.request
    session = Session.objects.get(pk=conversation.session.pk)
    return request.pending_digest if _unanswered(session, request) else request.earlier_digest
