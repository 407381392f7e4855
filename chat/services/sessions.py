"""Writes to sessions (their messages: chat.services.messages). Each function is one domain action."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from chat.models import (
    MAX_MODEL_NAME_LENGTH,
    MAX_SOURCE_FIELD_LENGTH,
    MAX_SYSTEM_PROMPT_CHARS,
    MAX_TITLE_LENGTH,
    Checkpoint,
    EventType,
    Message,
    Session,
    check_length,
)
from chat.selectors.sessions import ModelFacts, model_facts
from chat.services.branches import branch_copy, context_branch
from chat.services.compression import compression_maybe_schedule
from chat.services.events import event_record
from chat.services.goals import goal_create, goals_carry_over
from chat.services.messages import CREATE_BATCH, NewMessage, message_create_many
from chat.services.reliability import session_refresh_reliability
from chat.services.session_settings import context_carry_over, session_set_context_settings
from engine.core.budget import REPLY_MIN_TOKENS
from engine.core.config import ConfigError, canonical_settings, context_config_from_mapping
from engine.core.reliability import parameter_size_from_tag
from engine.core.text import storable_text
from engine.core.tiers import UnknownContextSize
from engine.core.titles import branch_title
from engine.core.tokens import TokenCount
from engine.resources import count_text_tokens, ollama_context_size

DEFAULT_TITLE = "New conversation"
# A session's client_digest while a request of its outside client is being answered: no digest matches it.
CLIENT_ANSWERING = ""


def _system_prompt_tokens(system_prompt: str) -> int:
    return count_text_tokens(system_prompt) if system_prompt else 0


@transaction.atomic
def session_create(
    *,
    owner: Any,
    model: str,
    context_size: int,
    title: str = "",
    system_prompt: str = "",
    summary_model: str = "",
    parameter_size_b: float | None = None,
    context_limit: int | None = None,
    settings: dict[str, Any] | None = None,
    client: str = "",
    parent: Session | None = None,
    forked_at_position: int | None = None,
    auto_title: bool = False,
) -> Session:
    """Start a conversation. ``max_tokens`` is the Ollama size of the selection, never the selection
    itself, and never more than ``context_limit`` (the model's own context length, when known).
    ``client``: the outside client that started it through the Ollama or OpenAI endpoint;
    ``parent`` and ``forked_at_position``: the session it branches from, and where (``session_branch``);
    ``auto_title``: without a ``title``, one is written once it has its first reply (the page's new chats)."""
    title = storable_text(title).strip()
    # Untitled, started on the page: titled once it has a reply (chat.services.titles.session_title_write).
    title_pending = auto_title and not title
    title = title or DEFAULT_TITLE
    model = storable_text(model).strip()
    system_prompt = storable_text(system_prompt)
    summary_model = storable_text(summary_model).strip()
    if not model:
        raise ValidationError({"model": "Choose a model."})
    check_length("title", title, MAX_TITLE_LENGTH)
    check_length("model", model, MAX_MODEL_NAME_LENGTH)
    check_length("summary_model", summary_model, MAX_MODEL_NAME_LENGTH)
    check_length("system_prompt", system_prompt, MAX_SYSTEM_PROMPT_CHARS)
    max_tokens = _max_tokens(context_size, model, context_limit)
    try:
        # Stored in one spelling (snake_case) whichever the caller used.
        settings = canonical_settings(settings)
        context_config_from_mapping(settings)
    except ConfigError as exc:
        raise ValidationError({"settings": str(exc)}) from exc
    system_tokens = _system_prompt_tokens(system_prompt)
    if system_tokens >= max_tokens:
        raise ValidationError(
            {"system_prompt": f"The system prompt is {system_tokens:,} tokens; the context holds {max_tokens:,}."}
        )

    session = Session.objects.create(
        owner=owner,
        title=title,
        model=model,
        model_parameter_size_b=parameter_size_b if parameter_size_b is not None else parameter_size_from_tag(model),
        context_size=context_size,
        max_tokens=max_tokens,
        system_prompt=system_prompt,
        system_prompt_tokens=system_tokens,
        summary_model=summary_model,
        settings=settings,
        client=storable_text(client)[:MAX_SOURCE_FIELD_LENGTH],
        parent=parent,
        forked_at_position=forked_at_position,
        title_pending=title_pending,
    )
    session_refresh_reliability(session=session)
    return session


def session_start(
    *,
    owner: Any,
    model: str,
    context_size: int,
    title: str = "",
    system_prompt: str = "",
    summary_model: str = "",
    goal: str = "",
    settings: dict[str, Any] | None = None,
    facts: ModelFacts | None = None,
    client: str = "",
    auto_title: bool = False,
) -> Session:
    """Start a conversation the way every door does (page, API, terminal, import).

    The backend is asked about the model first (``model_facts``: its parameter size and native
    context length; a model no enabled backend has is refused with a ValidationError). Ask it
    before any transaction, as it may wait on the network: ``facts`` are the answer when the
    caller asked already (an import asks before the transaction that stores the file).
    ``goal``: an active goal to start with; ``client``, ``auto_title``: see ``session_create``.
    """
    if facts is None:
        facts = model_facts(model=model)
    with transaction.atomic():
        session = session_create(
            owner=owner,
            model=model,
            context_size=context_size,
            title=title,
            system_prompt=system_prompt,
            summary_model=summary_model,
            settings=settings,
            parameter_size_b=facts.parameter_size_b,
            context_limit=facts.context_length,
            client=client,
            auto_title=auto_title,
        )
        if goal.strip():
            goal_create(session=session, description=goal)
    return session


def _max_tokens(context_size: int, model: str, context_limit: int | None) -> int:
    try:
        max_tokens = ollama_context_size(
            context_size, model=model, overrides=django_settings.OLLM_MODEL_CONTEXT_OVERRIDES
        )
    except UnknownContextSize as exc:
        raise ValidationError({"context_size": str(exc)}) from exc
    return min(max_tokens, context_limit) if context_limit else max_tokens


def session_update(
    *,
    session: Session,
    title: str | None = None,
    model: str | None = None,
    context_size: int | None = None,
    system_prompt: str | None = None,
    summary_model: str | None = None,
    settings: dict[str, Any] | None = None,
    recount: Recount | None = None,
) -> Session:
    """Change what the user may change about a session; ``None`` leaves a field as it is.

    A new model or size is looked up as ``session_start`` does, before the transaction: a new
    model no backend serves is refused; the session's own model need not be served now.
    This is the one way to switch a session whose model is not available (``model_availability``).
    ``settings``: the session's overrides of the context settings (``session_set_context_settings``).
    When any of model, context size, system prompt or settings is given, the budget is checked
    again in the same transaction (``compression_maybe_schedule``: the automatic snapshot, and a
    compression sent after commit if the session is now over its trigger).
    A switch of model is recorded as a ``model-switched`` event; ``recount``: the token counts of the
    session's messages and checkpoints for the new model (``chat.services.model_switch``), written before
    the budget is checked.
    """
    # Asked before the transaction: it may wait on the network.
    facts = None
    if model is not None or context_size is not None:
        # A new model must be served; the session's own may not be now (an imported file's),
        # which does not stop the rest of it changing.
        switching = model is not None and model.strip() != session.model
        facts = model_facts(model=model if model is not None else session.model, served=switching)
    with transaction.atomic():
        before = Session.objects.select_for_update().get(pk=session.pk)
        session = _session_store(
            session=session,
            title=title,
            model=model,
            context_size=context_size,
            system_prompt=system_prompt,
            summary_model=summary_model,
            facts=facts,
        )
        if settings is not None:
            session = session_set_context_settings(session=session, settings=settings)
        if session.model != before.model:
            _model_switched(before=before, session=session, recount=recount or Recount())
        if any(value is not None for value in (model, context_size, system_prompt, settings)):
            compression_maybe_schedule(session=session)
    return session


@dataclass(frozen=True)
class Recount:
    """A session's stored token counts for another model: message id → count, checkpoint id → tokens."""

    messages: Mapping[int, TokenCount] = field(default_factory=dict)
    checkpoints: Mapping[int, int] = field(default_factory=dict)


def _model_switched(*, before: Session, session: Session, recount: Recount) -> None:
    """Write ``recount`` and record the switch with the context's size before and after.
    Precondition: inside the transaction that switched the model."""
    messages = list(Message.objects.filter(session=session, pk__in=recount.messages))
    tokens_before = sum(m.tokens for m in messages)
    for message in messages:
        message.tokens, message.tokens_exact = recount.messages[message.pk].tokens, recount.messages[message.pk].exact
    Message.objects.bulk_update(messages, ["tokens", "tokens_exact"])
    checkpoints = list(Checkpoint.objects.filter(session=session, pk__in=recount.checkpoints))
    for checkpoint in checkpoints:
        checkpoint.current_tokens = recount.checkpoints[checkpoint.pk]
    Checkpoint.objects.bulk_update(checkpoints, ["current_tokens"])
    # The counts changed under the budget: the meter and the next turn read it again.
    session.next_context_version()
    event_record(
        session=session,
        type=EventType.MODEL_SWITCHED,
        payload={
            "from": before.model,
            "to": session.model,
            "max_tokens_before": before.max_tokens,
            "max_tokens": session.max_tokens,
            "messages_recounted": len(messages),
            "checkpoints_recounted": len(checkpoints),
            "tokens_before": tokens_before,
            "tokens_after": sum(m.tokens for m in messages),
        },
    )


def _session_store(
    *,
    session: Session,
    title: str | None,
    model: str | None,
    context_size: int | None,
    system_prompt: str | None,
    summary_model: str | None,
    facts: ModelFacts | None,
) -> Session:
    """The fields of ``session_update``, validated and saved under the session's row lock;
    ``facts``: what the backend said of the model, when the model or the size changed.
    Precondition: called inside a transaction."""
    locked = Session.objects.select_for_update().get(pk=session.pk)
    # What the prompt and its budget are made of, before.
    context_before = (locked.system_prompt, locked.system_prompt_tokens, locked.max_tokens)
    if title is not None:
        locked.title = storable_text(title).strip() or DEFAULT_TITLE
        locked.title_pending = False  # the user's title is not replaced by a written one
        check_length("title", locked.title, MAX_TITLE_LENGTH)
    if summary_model is not None:
        locked.summary_model = storable_text(summary_model).strip()
        check_length("summary_model", locked.summary_model, MAX_MODEL_NAME_LENGTH)
    if model is not None:
        model = storable_text(model).strip()
        if not model:
            raise ValidationError({"model": "Choose a model."})
        check_length("model", model, MAX_MODEL_NAME_LENGTH)
        if model != locked.model:
            locked.model = model
            known = facts.parameter_size_b if facts else None
            locked.model_parameter_size_b = known if known is not None else parameter_size_from_tag(model)
    if system_prompt is not None:
        locked.system_prompt = storable_text(system_prompt)
        check_length("system_prompt", locked.system_prompt, MAX_SYSTEM_PROMPT_CHARS)
        locked.system_prompt_tokens = _system_prompt_tokens(locked.system_prompt)
    if context_size is not None:
        locked.context_size = context_size
    if facts is not None:
        locked.max_tokens = _max_tokens(locked.context_size, locked.model, facts.context_length)
    if locked.system_prompt_tokens >= locked.max_tokens:
        raise ValidationError(
            {
                "system_prompt": f"The system prompt is {locked.system_prompt_tokens:,} tokens; "
                f"the context holds {locked.max_tokens:,}."
            }
        )
    locked.save()
    if (locked.system_prompt, locked.system_prompt_tokens, locked.max_tokens) != context_before:
        # A write to the context, as every other: a turn in flight then reads its context again.
        locked.next_context_version()
    session_refresh_reliability(session=locked)
    return locked


@transaction.atomic
def session_prompt_truncated(*, session: Session, sent_tokens: int, reported_tokens: int) -> Session:
    """Record that the model server evaluated only ``reported_tokens`` of a prompt of about
    ``sent_tokens`` (Ollama drops the front of a prompt longer than the context it allocated, and
    may allocate less than ``num_ctx``), and shrink the session's context to what the server was
    seen to hold, so that the next prompts fit it: a ``prompt-truncated`` event, the smaller
    ``max_tokens`` and, when the conversation is now over its trigger, a compression.

    ``reported_tokens`` is a lower bound of the server's real context: never more is assumed.
    A later change of model or context size asks for the full size again.
    """
    locked = Session.objects.select_for_update().get(pk=session.pk)
    asked = locked.max_tokens
    # Room for the system prompt and a reply, however little the server held.
    floor = locked.system_prompt_tokens + 2 * REPLY_MIN_TOKENS
    # The budget changes: the meter and the next turn read it again.
    locked.next_context_version(max_tokens=min(asked, max(reported_tokens, floor)))
    event_record(
        session=locked,
        type=EventType.PROMPT_TRUNCATED,
        payload={
            "sent_tokens": sent_tokens,
            "reported_tokens": reported_tokens,
            "num_ctx": asked,
            "max_tokens": locked.max_tokens,
        },
    )
    compression_maybe_schedule(session=locked)
    session.max_tokens = locked.max_tokens
    return locked


@transaction.atomic
def session_client_seen(*, session: Session, digest: str) -> None:
    """Remember the digest of the history the session's outside client now holds once its request is
    done (with the reply it got: ``ClientRequest.digest_with_reply``; without one: the request's
    ``pending_digest`` or ``earlier_digest``), which that client's next request resends."""
    Session.objects.filter(pk=session.pk).update(client_digest=digest)
    session.client_digest = digest


@transaction.atomic
def session_client_claim(*, session: Session, expected: str) -> bool:
    """Take the session for one request of its outside client: its digest goes from ``expected`` (what
    the request matched) to ``CLIENT_ANSWERING``, which no request matches, in one conditional update.
    False when another request took it first: that one continues the session, this one must not."""
    claimed = Session.objects.filter(pk=session.pk, client_digest=expected).update(client_digest=CLIENT_ANSWERING)
    if claimed:
        session.client_digest = CLIENT_ANSWERING
    return claimed == 1


@transaction.atomic
def session_delete(*, session: Session) -> None:
    """Delete a session with its whole history, checkpoints, goals, snapshots and events."""
    Session.objects.filter(pk=session.pk).delete()


@transaction.atomic
def session_continue(*, session: Session) -> Session:
    """A new session that carries what matters of ``session``: the system prompt and settings,
    the active goal with its progress, the locked decisions, and one ultra checkpoint: an extract
    of the compressed context and the recent messages, with every fact they held in its ledger
    (no LLM call, so it works when the model is the problem)."""
    successor = session_start(
        owner=session.owner,
        model=session.model,
        context_size=session.context_size,
        title=f"{session.title} (continued)"[:200],
        system_prompt=session.system_prompt,
        summary_model=session.summary_model,
        settings=session.settings,
        # The same model on the same context: no need to ask the backend, which may be the problem.
        facts=ModelFacts(parameter_size_b=session.model_parameter_size_b, context_length=session.max_tokens),
    )
    goals_carry_over(source=session, target=successor)
    context_carry_over(source=session, target=successor)
    return successor


# What a branch's copy of a message does not take from it (branch_copy): its place in the context and the link
# to its first version, which session_branch and context_branch set for the branch.
_BRANCH_SETS = ("compressed_into", "context_version", "excluded_from_context", "version_of")


@transaction.atomic
def session_branch(
    *,
    session: Session,
    at_message: Message,
    messages: Sequence[NewMessage] = (),
    client: str | None = None,
    goals_now: bool = False,
) -> Session:
    """A new session that goes on from ``at_message`` of ``session`` another way: it shares the
    history up to it (copied, at the same positions), starts from the managed state ``session`` had
    there (``context_branch``: the goal and its progress, decisions, artifacts, checkpoints; what was
    compressed stays compressed), then holds ``messages``. ``session`` is not changed.
    ``client``: the outside client the branch is for (None: ``session``'s). ``goals_now``: the goals,
    decisions and artifacts as they are now rather than as they stood at ``at_message`` (an outside
    client's Edit or Regenerate goes on with the conversation its user pinned them to).

    Holds ``session``'s row lock for the transaction. Precondition: the caller checked that the user owns
    ``session`` (``session_for_owner``). A ValidationError when ``at_message`` is not one of its messages,
    or a MessageRefused for ``messages``.
    """
    if at_message.session_id != session.pk:
        raise ValidationError({"message": "That message is not one of this session's."})
    # The session's row lock, which a compression, a goal change and a restore take before they write:
    # the branch copies one state of the session, not half of a compression committed meanwhile.
    Session.objects.select_for_update().get(pk=session.pk)
    through = at_message.position
    branch = session_create(
        owner=session.owner,
        model=session.model,
        context_size=session.context_size,
        title=branch_title(session.title, through, limit=MAX_TITLE_LENGTH),
        system_prompt=session.system_prompt,
        summary_model=session.summary_model,
        parameter_size_b=session.model_parameter_size_b,
        # The same model on the same context: no need to ask the backend.
        context_limit=session.max_tokens,
        settings=session.settings,
        client=session.client if client is None else client,
        parent=session,
        forked_at_position=through,
    )
    shared = Message.objects.filter(session=session, position__lte=through).order_by("position")
    for start in range(0, through, CREATE_BATCH):
        Message.objects.bulk_create(
            branch_copy(message, leave=_BRANCH_SETS, session=branch)
            for message in shared.filter(position__gt=start, position__lte=start + CREATE_BATCH)
        )
    # The copies have ids of their own: a version's link to its first version goes by position.
    first_positions = dict(shared.filter(version_of__isnull=False).values_list("position", "version_of__position"))
    copies = dict(Message.objects.filter(session=branch).values_list("position", "pk"))
    for position, first in first_positions.items():
        Message.objects.filter(pk=copies[position]).update(version_of_id=copies[first])
    context_branch(parent=session, branch=branch, through=through, goals_now=goals_now)
    if messages:
        message_create_many(session=branch, messages=messages)
    branch.refresh_from_db()
    compression_maybe_schedule(session=branch)
    return branch


@transaction.atomic
def session_archived_set(*, session: Session, archived: bool) -> Session:
    """Archive ``session`` (hidden from the session lists, kept whole) or bring it back. Precondition: the
    caller checked that the user owns it (``session_for_owner``)."""
    archived_at = timezone.now() if archived else None
    Session.objects.filter(pk=session.pk).update(archived_at=archived_at)
    session.archived_at = archived_at
    return session
