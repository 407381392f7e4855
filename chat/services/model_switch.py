"""Switch a session's model from the chat page (issue 47, item 10), among the models the site serves: the
context is recounted for the new model's tokenizer (every message and active checkpoint, counted before
the transaction: the bundled model server counts them) and its window (``session_update`` asks the backend
for its context length), and the switch is recorded in the timeline (a ``model-switched`` event)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from chat.gateway import get_gateway
from chat.models import Message, Session
from chat.selectors.context import active_checkpoints, checkpoint_view
from chat.selectors.sessions import model_names
from chat.services.sessions import Recount, session_update
from engine.core.window import render_checkpoint
from engine.llm import Gateway, LLMError


def session_model_switch(*, session: Session, model: str, gateway: Gateway | None = None) -> Session:
    """Switch ``session`` to ``model``; a ValidationError when it is the session's model already or is
    not among the models served here (the gateway's list), or when the new model cannot count now.

    Tool calls are counted as their stored text; a tool call waiting for its result keeps its count."""
    model = model.strip()
    if model == session.model:
        raise ValidationError({"model": f"This session uses {model} already."})
    served = model_names()
    if model not in served:
        raise ValidationError(
            {"model": f"{model or 'That model'} is not served here; choose one of {', '.join(served) or 'none'}."}
        )
    gateway = gateway or get_gateway()
    messages = list(Message.objects.filter(session=session).exclude(content="").only("id", "content"))
    checkpoints = list(active_checkpoints(session=session))
    try:
        counter = gateway.token_counter(model)
        counts = counter.count_all([m.content for m in messages])
        checkpoint_counts = [counter.count(render_checkpoint(checkpoint_view(c))).tokens for c in checkpoints]
    except LLMError as exc:
        raise ValidationError({"model": f"{model} cannot count the context now ({exc}); try again."}) from exc
    recount = Recount(
        messages={m.pk: count for m, count in zip(messages, counts, strict=True)},
        checkpoints={c.pk: tokens for c, tokens in zip(checkpoints, checkpoint_counts, strict=True)},
    )
    return session_update(session=session, model=model, recount=recount)
