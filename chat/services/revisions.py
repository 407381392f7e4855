"""Writes that take messages out of a session's context and keep them in its full history: a message
that cannot fit, the tail an edit or a regenerated reply replaces, the edited message itself, the part
of a stopped reply its client never got; and the choice between a message's versions."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from chat.models import Message, Session
from chat.services.attachments import attachment_still_in
from chat.services.messages import message_create
from engine.core.tokens import TokenCount


@transaction.atomic
def message_leave_context(*, message: Message) -> None:
    """Keep a message in the full history only: it stops counting toward the context and
    stops being sent (a user message that cannot fit the context, however much is compressed).

    Locks the session row, as every change of a message's context state does.
    """
    locked = Session.objects.select_for_update().get(pk=message.session_id)
    version = locked.next_context_version()
    Message.objects.filter(pk=message.pk).update(excluded_from_context=True, context_version=version)
    message.excluded_from_context = True
    message.context_version = version


@transaction.atomic
def messages_supersede(*, message: Message) -> int:
    """Take ``message`` and every message after it out of the context, keeping them in the full
    history: an edited message or a regenerated reply takes their place. How many left the context.

    Only the uncompressed tail can be replaced: a ValidationError when a message from ``message``
    on is already summarized in a checkpoint (its summary would still say what the user replaced).
    Locks the session row, as every change of a message's context state does.
    """
    locked = Session.objects.select_for_update().get(pk=message.session_id)
    later = Message.objects.filter(session=locked, position__gte=message.position)
    if later.filter(compressed_into__isnull=False).exists():
        raise ValidationError(
            {
                "content": "This message is older than the last compression: only the messages after it can be "
                "edited or regenerated (a snapshot from before it can be restored)."
            }
        )
    version = locked.next_context_version(last_activity=timezone.now())
    return later.filter(excluded_from_context=False).update(excluded_from_context=True, context_version=version)


@transaction.atomic
def message_edit(*, message: Message, content: str, token_count: TokenCount | None = None) -> Message:
    """The user's edited ``message``: it and everything after it leave the context (kept in the full
    history, as messages_supersede says) and ``content`` is stored as a new message at the end, with the
    message's attached file while ``content`` still holds it. All or nothing: an edit that cannot be
    stored leaves the context as it was."""
    if message.role != Message.Role.USER or message.excluded_from_context:
        raise ValidationError({"content": "Only your own messages in the context can be edited."})
    messages_supersede(message=message)
    return message_create(
        session=message.session,
        role=Message.Role.USER,
        content=content,
        token_count=token_count,
        version_of_id=message.version_of_id or message.pk,
        attachment_name=message.attachment_name
        if attachment_still_in(name=message.attachment_name, content=content)
        else "",
    )


@transaction.atomic
def message_cut(*, message: Message, content: str, token_count: TokenCount | None = None) -> Message | None:
    """A reply as far as its client kept it: the stored ``message`` leaves the context (kept in the full
    history, as messages_supersede says) and ``content``, the part the client holds, takes its place as a
    stopped reply; nothing does when the client kept none of it."""
    messages_supersede(message=message)
    if not content.strip():
        return None
    return message_create(
        session=Session.objects.get(pk=message.session_id),
        role=Message.Role.ASSISTANT,
        content=content,
        token_count=token_count,
        done_reason=message.done_reason,
    )


@transaction.atomic
def message_version_choose(*, session: Session, message: Message) -> int:
    """Make ``message``, one version of a regenerated reply or an edited message, the one in the
    context, with the messages that followed it; the version in the context now and every message
    after it leave the context (kept in the full history). The session's context version after it.

    Preconditions: ``message`` is one of ``session``'s messages (the caller checked the owner), and
    one of its versions is in the context (a version inside a tail that was itself replaced is
    reached by choosing that tail's version first). A ValidationError otherwise, and when either
    tail is already summarized in a checkpoint (as messages_supersede refuses). Choosing the version
    already in the context changes nothing.

    What followed a version is what left the context with it: the messages of its tail carry the
    context version they left at, the same as the version's own, so a tail comes back as it was
    left, with the versions chosen inside it.
    """
    locked = Session.objects.select_for_update().get(pk=session.pk)
    target = Message.objects.get(pk=message.pk, session=locked)
    first = target.version_of_id or target.pk
    current = (
        Message.objects.filter(session=locked, excluded_from_context=False)
        .filter(Q(pk=first) | Q(version_of_id=first))
        .first()
    )
    if current is None:
        raise ValidationError(
            {
                "version": "None of this message's versions is in the context: choose the version of the "
                "earlier message it follows first."
            }
        )
    if current.pk == target.pk:
        return locked.context_version
    leaving = Message.objects.filter(session=locked, position__gte=current.position, excluded_from_context=False)
    returning = Message.objects.filter(
        session=locked,
        position__gte=target.position,
        excluded_from_context=True,
        context_version=target.context_version,
    )
    if (
        leaving.filter(compressed_into__isnull=False).exists()
        or returning.filter(compressed_into__isnull=False).exists()
    ):
        raise ValidationError(
            {
                "version": "This message is older than the last compression: its versions can no longer be switched "
                "(a snapshot from before it can be restored)."
            }
        )
    returning_ids = list(returning.values_list("pk", flat=True))
    version = locked.next_context_version(last_activity=timezone.now())
    leaving.update(excluded_from_context=True, context_version=version)
    Message.objects.filter(pk__in=returning_ids).update(excluded_from_context=False, context_version=version)
    return version
