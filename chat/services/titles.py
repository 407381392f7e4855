"""A session's short title, written once it has its first reply (issue 47): asked of the model in the
background, never ahead of a turn (its request is ``background``, as a compression's summaries are),
or, when the model's answer is no title, the first words of the first message."""

from __future__ import annotations

import logging
from uuid import UUID

from asgiref.sync import async_to_sync
from django.db import transaction

from chat.gateway import get_gateway
from chat.models import MAX_TITLE_LENGTH, Message, Session
from chat.services.events import TitleRequested, publish
from engine.core.titles import TITLE_MAX_TOKENS, clean_title, fallback_title, title_prompt
from engine.llm import ChatMessage, ChatRequest, Gateway, LLMError, Sampling

logger = logging.getLogger(__name__)

# The title request's context: the prompt quotes at most a few hundred characters of each message.
TITLE_NUM_CTX = 1024


def session_title_schedule(*, session_id: UUID) -> None:
    """Write the session's title in the background once the current transaction commits (``TitleRequested``,
    which ``chat.tasks.task_dispatch`` runs: with a broker, a Celery task; without one, a thread of this
    process, so the turn does not wait)."""

    def enqueue() -> None:
        publish(TitleRequested(session_id=session_id))

    transaction.on_commit(enqueue)


def _first_exchange(session_id: UUID) -> tuple[str, str] | None:
    rows = Message.objects.filter(session_id=session_id, role__in=[Message.Role.USER, Message.Role.ASSISTANT])
    question = rows.filter(role=Message.Role.USER).order_by("position").values_list("content", flat=True).first()
    reply = rows.filter(role=Message.Role.ASSISTANT).order_by("position").values_list("content", flat=True).first()
    if question is None or reply is None:
        return None
    return question, reply


def session_title_write(*, session_id: UUID, gateway: Gateway | None = None) -> str | None:
    """Title a session that waits for one (``title_pending``) and has its first reply: the model's answer
    to ``title_prompt``, cleaned (``clean_title``), or the first words of the first message when that
    is empty or the model fails. The title written; None when there was none to write (titled meanwhile,
    by the user too, or no reply yet). The model is asked outside any transaction."""
    session = Session.objects.filter(pk=session_id, title_pending=True).first()
    exchange = _first_exchange(session_id) if session is not None else None
    if session is None or exchange is None:
        return None
    question, reply = exchange
    request = ChatRequest(
        [ChatMessage("user", title_prompt(question, reply))],
        model=session.model,
        num_ctx=min(TITLE_NUM_CTX, session.max_tokens),
        max_tokens=TITLE_MAX_TOKENS,
        sampling=Sampling(temperature=0.0, repeat_penalty=1.1),
        background=True,  # chat turns go first
    )
    try:
        answer = async_to_sync((gateway or get_gateway()).complete)(request).text
    except LLMError as exc:
        logger.info("session %s: the model wrote no title (%s); the first message gives it", session_id, exc)
        answer = ""
    title = (clean_title(answer) or fallback_title(question) or session.title)[:MAX_TITLE_LENGTH]
    with transaction.atomic():
        written = Session.objects.filter(pk=session_id, title_pending=True).update(title=title, title_pending=False)
    return title if written else None
