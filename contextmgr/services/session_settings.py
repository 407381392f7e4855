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
from contextmgr.core.tokens import TiktokenCounter
from contextmgr.core.truncate import shorten_extractive
from contextmgr.core.window import render_checkpoint
from contextmgr.models import Checkpoint, Decision, Goal, GoalCheckpoint
from contextmgr.selectors import active_checkpoints, active_goal, active_messages, checkpoint_view, session_budget
from contextmgr.services.checkpoints import checkpoint_carry_over, facts_carried
from contextmgr.services.compression import compression_maybe_schedule, default_config, session_config


@transaction.atomic
def session_set_context_settings(*, session: Session, settings: Mapping[str, Any]) -> Session:
    """Replace the session's overrides of the global context settings, validated.

    A preserved tail larger than the budget it would leave is refused (it could
    never let a compression free anything). Turning compression on when the
    conversation is already over its trigger schedules one after commit.
    """
    try:
        config = context_config_from_mapping(settings, base=default_config())
    except ConfigError as exc:
        raise ValidationError({"settings": str(exc)}) from exc
    available = session_budget(session=session).available
    if config.compression.preserve_recent > available:
        raise ValidationError(
            {
                "settings": f"compression.preserve_recent is {config.compression.preserve_recent:,} tokens, more "
                f"than this session's available budget of {available:,}: nothing could ever be compressed."
            }
        )
    if config.compression.summary_max_tokens >= session.max_tokens:
        raise ValidationError(
            {
                "settings": f"compression.summary_max_tokens is {config.compression.summary_max_tokens:,}, not less "
                f"than the context of {session.max_tokens:,} tokens."
            }
        )
    Session.objects.filter(pk=session.pk).update(settings=dict(settings))
    session.settings = dict(settings)
    compression_maybe_schedule(session=session)
    return session


@transaction.atomic
def session_continue(*, session: Session) -> Session:
    """A new session that carries what matters of ``session``: the system prompt and settings,
    the active goal with its progress, the locked decisions, and one final checkpoint that
    holds the compressed context and an extract of the recent messages (no LLM call, so it
    works when the model is the problem)."""
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
    counter = TiktokenCounter()
    target = session_config(session).compression.summary_max_tokens
    recent = "\n".join(f"{m.role}: {m.content}" for m in messages)
    parts = [render_checkpoint(checkpoint_view(cp)) for cp in checkpoints]
    if recent:
        parts.append(shorten_extractive(recent, target, lambda text: counter.count(text).tokens))
    if parts:
        final = Checkpoint(
            session=successor,
            number=0,
            level=Level.ULTRA,
            range_label=f"Carried over from “{session.title}”"[:100],
            summary="\n\n".join(parts),
            original_tokens=sum(cp.original_tokens for cp in checkpoints) + sum(m.tokens for m in messages),
            key_decisions=list(dict.fromkeys(d for cp in checkpoints for d in cp.key_decisions)),
            files_modified=list(dict.fromkeys(f for cp in checkpoints for f in cp.files_modified)),
            facts=facts_to_json(facts_carried(checkpoints, messages)),
            current_tokens=0,
        )
        checkpoint_carry_over(checkpoint=final, counter=counter)
    return successor
