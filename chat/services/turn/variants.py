"""What a turn answers: each variant finds (or stores) the user's message the reply answers (the last tool
result, for TurnToolResults), whose ``session`` is the session as the reply must read it. A new message is
stored first, before anything can fail."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TypeAlias

from django.core.exceptions import ValidationError

from chat.models import Message, Session
from chat.selectors.sessions import session_latest_message
from chat.services.attachments import Attachment, attachment_check, attachment_content, message_attach
from chat.services.counting import message_counter
from chat.services.messages import ToolResult, message_create, message_tool_results
from chat.services.revisions import message_edit, messages_supersede
from engine.core.tokens import TokenCount, TokenCounter
from engine.llm import Gateway
from engine.resources import TiktokenCounter

logger = logging.getLogger(__name__)


def count_text(counter: TokenCounter, text: str) -> TokenCount:
    """Count in the turn's thread (a long message takes a while, and the embedded tokenizer may have
    to load the model first: the turn has the thread to itself). If the model's counter fails, the
    estimate will do: nothing may stop a message being stored."""
    try:
        return counter.count(text)
    except Exception:
        logger.exception("exact token count failed; storing the estimate")
        return TiktokenCounter().count(text)


@dataclass(frozen=True)
class TurnSend:
    """A new message of the user's: stored first, before anything can fail."""

    content: str
    # A text file sent with it (issue 47, item 9): its text becomes part of the stored content.
    attachment: Attachment | None = None

    def message(self, session: Session, gateway: Gateway) -> Message:
        if self.attachment is not None:
            attachment = attachment_check(name=self.attachment.name, text=self.attachment.text)
            content = attachment_content(message=self.content, attachment=attachment)
            count = count_text(message_counter(gateway, session.model), content)
            return message_attach(session=session, content=content, attachment=attachment, token_count=count)
        count = count_text(message_counter(gateway, session.model), self.content)
        # Its ``session`` is the session as the message was written, which the rest of the turn reads.
        return message_create(session=session, role=Message.Role.USER, content=self.content, token_count=count)


@dataclass(frozen=True)
class TurnRetry:
    """The session's last message answered again when it is a user message left without a reply
    (the backend failed, or the user stopped it); nothing is stored twice."""

    def message(self, session: Session, gateway: Gateway) -> Message:
        last = session_latest_message(session=session)
        # A tool's result left without a reply is retried as a user message is.
        unanswered = last is not None and (
            last.role == Message.Role.USER or (last.role == Message.Role.TOOL and bool(last.content))
        )
        if last is None or not unanswered:
            raise ValidationError({"content": "There is no unanswered message to retry."})
        if last.excluded_from_context:
            raise ValidationError(
                {"content": "The last message does not fit this session's context: it is kept in the history only."}
            )
        last.session = session
        return last


def _latest_reply_and_question(session: Session, done: str) -> tuple[Message, Message]:
    """The session's latest reply, which must be in the context, and the user message in the context
    it answers; ``done`` names what is to be done to the reply, for the error."""
    reply = session_latest_message(session=session)
    if reply is None or reply.role != Message.Role.ASSISTANT or reply.excluded_from_context:
        raise ValidationError({"content": f"Only the latest reply can be {done}."})
    question = (
        session.messages.filter(role=Message.Role.USER, position__lt=reply.position, excluded_from_context=False)
        .order_by("-position")
        .first()
    )
    if question is None:
        raise ValidationError({"content": "This reply answers no message of yours in the context."})
    return reply, question


@dataclass(frozen=True)
class TurnRegenerate:
    """The last user message answered again: the latest reply leaves the context (it stays in the full
    history) and a new one is streamed after it."""

    def message(self, session: Session, gateway: Gateway) -> Message:
        reply, question = _latest_reply_and_question(session, "regenerated")
        messages_supersede(message=reply)
        question.session = Session.objects.get(pk=session.pk)  # the reply's leaving moved the context version
        return question


@dataclass(frozen=True)
class TurnEdit:
    """``content`` in place of the user's message ``message_id`` (message_edit: the earlier version and
    what followed it stay in the full history), answered as a new message is."""

    message_id: int
    content: str

    def message(self, session: Session, gateway: Gateway) -> Message:
        original = session.messages.filter(pk=self.message_id).first()
        if original is None:
            raise ValidationError({"content": "There is no such message in this session."})
        original.session = session
        count = count_text(message_counter(gateway, session.model), self.content)
        return message_edit(message=original, content=self.content, token_count=count)


@dataclass(frozen=True)
class TurnContinue:
    """The latest reply continued: the prompt ends with it, so the model goes on from where it ends; it
    then leaves the context (kept in the full history) for the whole."""

    def message(self, session: Session, gateway: Gateway) -> Message:
        _, question = _latest_reply_and_question(session, "continued")
        question.session = session
        return question


@dataclass(frozen=True)
class TurnToolResults:
    """The results of the latest reply's tool calls, as a client of the drop-in APIs sends them: stored with
    the calls they answer (``message_tool_results``), then answered by the model."""

    results: tuple[ToolResult, ...]

    def message(self, session: Session, gateway: Gateway) -> Message:
        counter = message_counter(gateway, session.model)
        counted = [(result, count_text(counter, result.content)) for result in self.results]
        return message_tool_results(session=session, results=counted)


# What a turn answers: each variant finds (or stores) the user's message the reply answers (the last tool
# result, for TurnToolResults), whose ``session`` is the session as the reply must read it.
TurnVariant: TypeAlias = TurnSend | TurnRetry | TurnRegenerate | TurnEdit | TurnContinue | TurnToolResults
