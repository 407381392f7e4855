"""The HTML frames the chat socket sends, and the history window the chat page shows."""

from __future__ import annotations

from itertools import groupby
from typing import Any
from uuid import UUID

from django.db.models import Max
from django.template.loader import render_to_string

from chat.models import Message, Session
from chat.selectors.context import ContextReport
from chat.selectors.presentation import announce_event
from chat.selectors.sessions import HISTORY_WINDOW, session_history, session_latest_message, session_version_layout
from chat.web.panels import context_panel, goals_context, snapshots_context

CHECKPOINT_TEXTS = tuple(
    f"compressed_into__{name}" for name in ("summary", "facts", "key_decisions", "files_modified", "next_steps")
)


def _live_checkpoint_id(message: Message) -> int | None:
    """The checkpoint the message is compressed into, unless a restore retired it."""
    checkpoint = message.compressed_into
    return None if checkpoint is None or checkpoint.retired else checkpoint.pk


def history_groups(
    session: Session, *, around: int | None = None, before: int | None = None, answering: bool = False
) -> dict[str, Any]:
    """The latest HISTORY_WINDOW messages; with ``before`` (a position) the window of messages just
    before it; with ``around`` (a message id) the window centred on that message. Consecutive
    messages compressed into the same checkpoint are grouped under its marker; the rest is a
    link away ("earlier", "show the latest"), on the full history page and in the export.

    Also which messages offer a turn: the last one Retry when it is a user message left unanswered
    (not while ``answering`` it), Regenerate when it is a reply; Edit the user's messages after
    the last compressed one (``editable_after``, a position). Of a message with other versions only
    the one in the context shows, with its switcher (``version_switches``, session_version_layout)."""
    total = session.messages.count()
    end = total
    if before is not None and 1 < before <= total:
        end = before - 1  # positions are 1-based and gapless: position p is row p - 1
    start = max(end - HISTORY_WINDOW, 0)
    if around is not None:
        position = session.messages.filter(pk=around).values_list("position", flat=True).first()
        if position is not None and position <= start:
            start = max(position - HISTORY_WINDOW // 2, 0)
            end = min(start + HISTORY_WINDOW, total)
    layout = session_version_layout(session=session)
    # The group markers need only a checkpoint's number, level and merge; its texts and facts
    # (JSON, large after many compressions) stay in the database.
    messages = [
        m for m in session_history(session=session).defer(*CHECKPOINT_TEXTS)[start:end] if m.pk not in layout.hidden
    ]
    # A checkpoint a restore retired no longer holds its messages: they show as what they are now
    # (history only, out of the context), not under its marker (issue 47, item 6).
    groups = [
        (checkpoint_id and rows[0].compressed_into, rows)
        for checkpoint_id, rows in ((key, list(group)) for key, group in groupby(messages, key=_live_checkpoint_id))
    ]
    last = session_latest_message(session=session, layout=layout)
    if last is not None and last.excluded_from_context:
        last = None  # too long for the context, or replaced: nothing to answer or regenerate
    return {
        "groups": groups,
        "version_switches": layout.switches,
        "hidden_count": start,
        "first_position": start + 1,
        "later_count": total - end,
        "unanswered_id": last.pk if last and last.role == Message.Role.USER and not answering else None,
        "regenerable_id": last.pk if last and last.role == Message.Role.ASSISTANT else None,
        "editable_after": _editable_after(session),
    }


def _editable_after(session: Session) -> int:
    """The position of the last compressed message: the user's messages after it may be edited."""
    return session.messages.filter(compressed_into__isnull=False).aggregate(p=Max("position"))["p"] or 0


# More new messages than this since a page's last are shown as the whole history again, not appended.
APPEND_AT_MOST = 10


def appended_groups(session: Session, *, after_position: int) -> dict[str, Any] | None:
    """For a page that shows the history up to ``after_position``: the messages after it to append, and
    the message at it again (``previous``: its Retry or Regenerate gone once something follows it).
    None when the page must show the history whole instead: a compression or a version moved what it
    shows, or many messages came."""
    rows = list(
        session_history(session=session)
        .defer(*CHECKPOINT_TEXTS)
        .filter(position__gte=after_position)[: APPEND_AT_MOST + 2]
    )
    previous = rows.pop(0) if rows and rows[0].position == after_position else None
    if not rows or len(rows) > APPEND_AT_MOST or (previous is None and after_position > 0):
        return None
    if any(m.compressed_into_id or m.version_of_id for m in rows) or (previous and previous.compressed_into_id):
        return None
    layout = session_version_layout(session=session)
    if any(m.pk in layout.hidden for m in (*rows, *([previous] if previous else []))):
        return None
    last = rows[-1]
    answerable = not last.excluded_from_context
    return {
        "appended": rows,
        "previous": previous,
        "previous_anchor": f"msg-{previous.pk}" if previous else "",
        "version_switches": layout.switches,
        "first_position": rows[0].position,
        "unanswered_id": last.pk if answerable and last.role == Message.Role.USER else None,
        "regenerable_id": last.pk if answerable and last.role == Message.Role.ASSISTANT else None,
        "editable_after": _editable_after(session),
    }


def chat_fragments(
    kind: str, session_id: UUID, *, session: Session | None = None, report: ContextReport | None = None, **extra: Any
) -> str:
    """HTML frames for the chat socket, swapped into the page out of band by id.

    ``turn_start``: the stored user message and an empty reply (the whole history and the reply
    instead with ``with_history``: a retry, an edit, a regeneration); ``turn_join``: for a page
    opened while a reply streams, the history and the reply so far (``reply_text``, ``reply_status``)
    once the user's message is ``stored``, and that a reply is coming; ``turn_done``: the stored
    reply in place of the streamed one (the whole history instead with ``with_history``)
    and the panels, the goals panel only when ``goals_changed``; ``turn_stopped`` and ``history``:
    the history and panels again; ``goals``: the goals panel and the meter;
    ``event``: a context event's line, and the history unless a reply is streaming; ``appended``: the
    messages after ``after_position`` appended (``appended_groups``; else the history) and the panels.
    ``session``: the session as the caller has just read it (it is read here otherwise); ``report``:
    its context as just read (``session_context``), for the meter and the panels.
    """
    if session is None:
        session = Session.objects.get(pk=session_id)
    # A message sent now is the newest: no compression covers it yet, so it can be edited.
    context: dict[str, Any] = {
        "session": session,
        "kind": kind,
        "can_write": True,
        "oob": True,
        "editable_after": 0,
        **extra,
    }
    if kind == "appended":
        appended = appended_groups(session, after_position=extra["after_position"])
        if appended is None:
            kind = context["kind"] = "history"
        else:
            context.update(appended)
    # A new version of a reply comes with its switcher, which only the whole history has.
    new_version = kind == "turn_done" and extra["assistant_message"].version_of_id is not None
    with_history = (
        kind in ("turn_stopped", "history")
        or new_version
        or (kind in ("turn_start", "turn_done", "event") and bool(extra.get("with_history")))
        or (kind == "turn_join" and bool(extra.get("stored")))
    )
    if kind not in ("turn_start", "turn_join"):
        context.update(context_panel(session, report=report))
        # Re-sent at the end of a turn only when the goals may have changed: the panel holds forms
        # the user may be typing in while the reply streams. Messages appended from elsewhere leave
        # them as they were: a change of the goals (a reply's markers) comes as a frame of its own.
        context["with_goals"] = (
            kind not in ("turn_done", "appended") or with_history or bool(extra.get("goals_changed"))
        )
        if context["with_goals"]:
            context.update(goals_context(session))
    if with_history:
        context.update(history_groups(session, answering=kind in ("turn_start", "turn_join")))
        context["with_history"] = True
    elif kind == "turn_done":
        context["regenerable_id"] = extra["assistant_message"].pk
    if kind == "event":
        event = extra["event"]
        context["event_line"] = announce_event(event["type"], event["payload"])
        context.update(snapshots_context(session))
    return render_to_string("chat/ws/_fragments.html", context)
