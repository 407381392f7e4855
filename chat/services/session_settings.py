"""A session's context settings (the spec's compression and snapshot config), and the context a
continued session starts from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from chat.gateway import get_gateway
from chat.models import Checkpoint, Session
from chat.selectors.context import active_checkpoints, active_messages, default_config, session_budget
from chat.services.checkpoints import checkpoint_carry_over
from chat.services.compression import session_effective_limits
from chat.services.facts import carried_facts, ledger_fit, ultra_ledger_share
from engine.core.aging import Level
from engine.core.config import ConfigError, canonical_settings, context_config_from_mapping
from engine.core.ranges import carried_over
from engine.core.retention import facts_to_json
from engine.core.truncate import shorten_extractive


@transaction.atomic
def session_set_context_settings(*, session: Session, settings: Mapping[str, Any]) -> Session:
    """Replace the session's overrides of the global context settings, validated.

    A ``preserve_recent`` or ``summary_max_tokens`` set larger than this
    session's budget can hold (a third and a sixth of the context after the
    system prompt, ``engine.core.config.session_limits``) is refused with the
    largest value it accepts; a value left out follows the context size. The
    caller (``chat.services.sessions.session_update``) checks the budget again afterwards. The spec's
    camelCase keys are taken and stored in the snake_case spelling, so one form is stored.
    """
    try:
        settings = canonical_settings(settings)
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
    Session.objects.filter(pk=session.pk).update(settings=settings)
    session.settings = settings
    return session


@transaction.atomic
def context_carry_over(*, source: Session, target: Session) -> None:
    """Start ``target``'s context with one ultra checkpoint of ``source``'s (as a rollover makes):
    an extract of the summaries and the recent messages within the ultra target, with every
    fact they held in its ledger. No LLM call, so it works when the model is the problem."""
    checkpoints = list(active_checkpoints(session=source))
    messages = list(active_messages(session=source))
    if checkpoints or messages:
        counter = get_gateway().token_counter(target.model)
        ultra_target = session_effective_limits(target).rollover_target
        text = "\n".join([cp.summary for cp in checkpoints] + [f"{m.role}: {m.content}" for m in messages])
        carried = carried_facts(checkpoints, messages, with_history=True)
        final = Checkpoint(
            session=target,
            number=0,
            level=Level.ULTRA,
            origin=carried_over(source.title).origin,
            summary=shorten_extractive(text, ultra_target, lambda part: counter.count(part).tokens),
            original_tokens=sum(cp.original_tokens for cp in checkpoints) + sum(m.tokens for m in messages),
            key_decisions=list(dict.fromkeys(d for cp in checkpoints for d in cp.key_decisions)),
            files_modified=list(dict.fromkeys(f for cp in checkpoints for f in cp.files_modified)),
            facts=facts_to_json(carried.facts),
            current_tokens=0,
        )
        ledger = ledger_fit(
            session=target,
            facts=carried.ledger,
            shown=[final.summary, *final.key_decisions, *final.files_modified],
            beside="",  # the new session's context starts with this checkpoint alone
            share=ultra_ledger_share(session=target, summary_tokens=ultra_target),
        )
        checkpoint_carry_over(checkpoint=final, ledger=ledger, counter=counter)
