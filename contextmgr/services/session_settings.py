"""A session's context settings (the spec's compression and snapshot config), and starting
over from a session whose compressed context can no longer be trusted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from chat.models import Session
from chat.services import session_create
from contextmgr.core.aging import Level
from contextmgr.core.config import ConfigError, context_config_from_mapping
from contextmgr.core.retention import facts_to_json
from contextmgr.core.truncate import shorten_extractive
from contextmgr.llm import get_gateway
from contextmgr.models import Checkpoint, Decision, Goal, GoalCheckpoint
from contextmgr.selectors import active_checkpoints, active_goal, active_messages, session_budget
from contextmgr.services.checkpoints import checkpoint_carry_over, facts_carried, ledger_carried, ledger_fit
from contextmgr.services.compression import (
    compression_maybe_schedule,
    default_config,
    session_effective_limits,
)


@transaction.atomic
def session_set_context_settings(*, session: Session, settings: Mapping[str, Any]) -> Session:
    """Replace the session's overrides of the global context settings, validated.

    A ``preserve_recent`` or ``summary_max_tokens`` set larger than this
    session's budget can hold (a third and a sixth of the context after the
    system prompt, ``contextmgr.core.config.session_limits``) is refused with the
    largest value it accepts; a value left out follows the context size. Turning
    compression on when the conversation is already over its trigger schedules
    one after commit.
    """
    try:
        config = context_config_from_mapping(settings, base=default_config())
    except ConfigError as exc:
        raise ValidationError({"settings": str(exc)}) from exc
    budget = session_budget(session=session)
    limits = session_effective_limits(session, config, budget)
    given = settings.get("compression") or {}
    for key, limit, share in (
        ("preserve_recent", limits.preserve_recent_limit, "a third"),
        ("summary_max_tokens", limits.summary_max_tokens_limit, "a sixth"),
    ):
        value = getattr(config.compression, key)
        if key in given and value > limit:
            raise ValidationError(
                {
                    "settings": f"compression.{key} is {value:,} tokens, more than this session can hold: at most "
                    f"{limit:,} ({share} of the {session.max_tokens - budget.system_prompt_tokens:,} tokens its "
                    "context leaves after the system prompt)."
                }
            )
    Session.objects.filter(pk=session.pk).update(settings=dict(settings))
    session.settings = dict(settings)
    compression_maybe_schedule(session=session)
    return session


@transaction.atomic
def session_continue(*, session: Session) -> Session:
    """A new session that carries what matters of ``session``: the system prompt and settings,
    the active goal with its progress, the locked decisions, and one ultra checkpoint: an extract
    of the compressed context and the recent messages, with every fact they held in its ledger
    (no LLM call, so it works when the model is the problem)."""
    successor = session_create(
        owner=session.owner,
        model=session.model,
        context_size=session.context_size,
        title=f"{session.title} (continued)"[:200],
        system_prompt=session.system_prompt,
        parameter_size_b=session.model_parameter_size_b,
        settings=session.settings,
    )
    successor.summary_model = session.summary_model
    successor.save(update_fields=["summary_model"])
    goal = active_goal(session=session)
    if goal is not None:
        carried = Goal.objects.create(
            session=successor, description=goal.description, priority=goal.priority, next_step=goal.next_step
        )
        GoalCheckpoint.objects.bulk_create(
            GoalCheckpoint(goal=carried, description=cp.description, status=cp.status) for cp in goal.checkpoints.all()
        )
    Decision.objects.bulk_create(
        Decision(session=successor, description=d.description, locked=True)
        for d in Decision.objects.filter(session=session, locked=True)
    )
    checkpoints = list(active_checkpoints(session=session))
    messages = list(active_messages(session=session))
    if checkpoints or messages:
        counter = get_gateway().token_counter(successor.model)
        # One ultra checkpoint, as a rollover makes: an extract of the summaries and recent
        # messages within the ultra target, and every carried fact in its ledger.
        target = session_effective_limits(successor).rollover_target
        source = "\n".join([cp.summary for cp in checkpoints] + [f"{m.role}: {m.content}" for m in messages])
        final = Checkpoint(
            session=successor,
            number=0,
            level=Level.ULTRA,
            range_label=f"Carried over from “{session.title}”"[:100],
            summary=shorten_extractive(source, target, lambda text: counter.count(text).tokens),
            original_tokens=sum(cp.original_tokens for cp in checkpoints) + sum(m.tokens for m in messages),
            key_decisions=list(dict.fromkeys(d for cp in checkpoints for d in cp.key_decisions)),
            files_modified=list(dict.fromkeys(f for cp in checkpoints for f in cp.files_modified)),
            facts=facts_to_json(facts_carried(checkpoints, messages)),
            current_tokens=0,
        )
        ledger = ledger_fit(
            session=successor,
            facts=ledger_carried(checkpoints, messages),
            structured="\n".join(final.key_decisions + final.files_modified),
        )
        checkpoint_carry_over(checkpoint=final, ledger=ledger, counter=counter)
    return successor
