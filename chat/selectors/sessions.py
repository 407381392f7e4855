"""Reads of chat sessions, always scoped to the user who asks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db.models import Max, OuterRef, Q, QuerySet, Subquery
from django.shortcuts import get_object_or_404

from chat.gateway import get_gateway
from chat.models import ChatDefaults, ClientTask, Message, Session
from chat.selectors.context import ACTIVE_MESSAGE
from engine.core.client_history import shared_length
from engine.llm import BackendStatus, Gateway, HostReport, LLMError, ModelInfo, ModelNotFound

# How many of the latest messages the chat page shows; "earlier" pages back by as many (a search hit
# further back is shown in its own window). Rendering is what a page costs: this many keep a long
# session's page within its target (bench/page_load.py, docs/benchmarks.md).
HISTORY_WINDOW = 100


def sessions_for_user(*, user: Any) -> QuerySet[Session]:
    """The sessions a user may see: their own, most recently active first."""
    return Session.objects.filter(owner=user).order_by("-last_activity")


def chat_defaults_for(*, user: Any) -> ChatDefaults:
    """What the user's new chat starts with (the account page): their saved defaults, or the app's."""
    return ChatDefaults.objects.filter(owner=user).first() or ChatDefaults(owner=user)


def sidebar_sessions(*, user: Any, archived: bool = False) -> list[tuple[Session, int]]:
    """The user's sessions for the chat page's sidebar, each with its depth: most recently active first,
    each branch right under its parent (a branch whose parent is not listed stands on its own); the
    archived ones instead with ``archived``."""
    sessions = list(
        Session.objects.filter(owner=user, archived_at__isnull=not archived)
        .only("id", "title", "parent_id", "forked_at_position", "last_activity", "title_pending", "archived_at")
        .order_by("-last_activity")
    )
    listed = {session.pk for session in sessions}
    children: dict[UUID, list[Session]] = {}
    for session in sessions:
        if session.parent_id in listed:
            children.setdefault(session.parent_id, []).append(session)
    ordered: list[tuple[Session, int]] = []

    def place(session: Session, depth: int) -> None:
        ordered.append((session, depth))
        for child in children.get(session.pk, []):
            place(child, depth + 1)

    for session in sessions:
        if session.parent_id not in listed:
            place(session, 0)
    return ordered


def session_for_viewer(*, user: Any, session_id: UUID) -> Session:
    """A session the user may look at: their own, or any when they are staff (read-only).

    Raises Http404 for any other, as for one that does not exist: whether it exists is not told.
    """
    sessions = Session.objects.all() if user.is_staff else sessions_for_user(user=user)
    return get_object_or_404(sessions, pk=session_id)


def session_for_owner(*, user: Any, session_id: UUID) -> Session:
    """A session the user may change: only their own. Raises Http404 for any other."""
    return get_object_or_404(sessions_for_user(user=user), pk=session_id)


def session_for_file(*, user: Any, file_session_id: str) -> Session | None:
    """The user's session whose session file has this ``sessionId``, if any: the one imported from a
    file with that sessionId or, when none was, the one started here with that id."""
    if not file_session_id:
        return None
    sessions = sessions_for_user(user=user)
    found = sessions.filter(source_session_id=file_session_id).first()
    if found is None:
        try:
            own_id = UUID(file_session_id)
        except ValueError:
            return None
        found = sessions.filter(pk=own_id, source_session_id="").first()
    return found


def session_for_client_history(*, user: Any, digests: Sequence[str]) -> Session | None:
    """The user's session, most recently active first, whose outside client holds a history with one
    of these digests (``Session.client_digest``): the one a request resending it continues."""
    return sessions_for_user(user=user).filter(client_digest__in=digests).first()


def message_of_session(*, session: Session, message_id: int | None = None, position: int | None = None) -> Message:
    """The message of ``session`` with that id, or at that position; Http404 when it has none."""
    lookup = {"pk": message_id} if message_id is not None else {"position": position}
    return get_object_or_404(Message, session=session, **lookup)


def session_branches(*, session: Session) -> QuerySet[Session]:
    """The sessions that branched from ``session``, oldest fork first (they have its owner)."""
    return Session.objects.filter(parent=session).order_by("forked_at_position", "created_at")


# How many of a user's sessions, latest first, a diverged client history is compared with.
BRANCH_CANDIDATES = 20


def session_fork_point(
    *, user: Any, system_prompt: str, history: Sequence[tuple[str, str]], session_id: UUID | None = None
) -> Message | None:
    """The last message a diverged client ``history`` (``(role, content)`` as stored, oldest first)
    shares with the user's session that shares the most of it (the latest such session on a tie):
    where its branch forks. Only sessions with the same system prompt count, and only ``session_id``
    when named; None when no session shares even the first message."""
    if not history:
        return None
    role, first = history[0]
    candidates = sessions_for_user(user=user).filter(
        messages__position=1, messages__role=role, messages__content__in={first, first.strip()}
    )
    if session_id is not None:
        candidates = candidates.filter(pk=session_id)
    best: tuple[int, Session] | None = None
    for session in candidates[:BRANCH_CANDIDATES]:
        if session.system_prompt.strip() != system_prompt.strip():
            continue
        stored = session.messages.filter(position__lte=len(history)).order_by("position")
        shared = shared_length(list(stored.values_list("role", "content")), history)
        if shared and (best is None or shared > best[0]):
            best = (shared, session)
    if best is None:
        return None
    return best[1].messages.get(position=best[0])


def session_holds_history(*, session: Session, system_prompt: str, history: Sequence[tuple[str, str]]) -> bool:
    """``history`` (``(role, content)``, oldest first, under the same system prompt) is the session's whole
    stored history or its active context, as the REST API lists them: what a client resends that read the
    session (its page's turns included)."""
    if session.system_prompt.strip() != system_prompt.strip():
        return False
    for messages in (session.messages.all(), session.messages.filter(ACTIVE_MESSAGE)):
        stored = list(messages.order_by("position").values_list("role", "content")[: len(history) + 1])
        if len(stored) == len(history) and shared_length(stored, history) == len(history):
            return True
    return False


# How many of a user's latest stopped replies a request is compared with: a client resends the one it
# stopped with its next request, so it is among the latest.
STOPPED_REPLIES_COMPARED = 20


def stopped_replies(*, user: Any, session_id: UUID | None = None) -> list[Message]:
    """The user's latest replies a client stopped (``done_reason`` "cancelled") that are still the last
    message of their session and in its context, latest first, each with its session; only that
    session's with ``session_id``."""
    last = Message.objects.filter(session=OuterRef("session")).values("session").annotate(at=Max("position"))
    replies = Message.objects.filter(
        session__owner=user,
        role=Message.Role.ASSISTANT,
        done_reason="cancelled",
        excluded_from_context=False,
        position=Subquery(last.values("at")),
    )
    if session_id is not None:
        replies = replies.filter(session_id=session_id)
    return list(replies.select_related("session").order_by("-pk")[:STOPPED_REPLIES_COMPARED])


def client_tasks_recent(*, user: Any, limit: int = 20) -> list[ClientTask]:
    """The newest background tasks of ``user``'s clients (``chat.services.client_tasks``), their tokens loaded."""
    return list(ClientTask.objects.filter(owner=user).select_related("token").order_by("-created_at", "-id")[:limit])


def session_history(*, session: Session) -> QuerySet[Message]:
    """The full history in order, with the checkpoint that covers each compressed message."""
    return Message.objects.filter(session=session).select_related("compressed_into").order_by("position")


def message_versions(*, message: Message) -> list[Message]:
    """Every version of ``message`` (itself included), first first: a regenerated reply's, an edited
    message's (see Message.version_of)."""
    first = message.version_of_id or message.pk
    return list(
        Message.objects.filter(session_id=message.session_id)
        .filter(Q(pk=first) | Q(version_of_id=first))
        .order_by("position")
    )


@dataclass(frozen=True)
class VersionSwitch:
    """The ‹ n/m › of a message that has other versions: ``number`` of ``count``, and the ids of the
    versions before and after it (None at either end)."""

    number: int
    count: int
    previous_id: int | None
    next_id: int | None


@dataclass(frozen=True)
class VersionLayout:
    """How the chat page shows a session's versions: the ``switches`` of the versions it shows (by
    message id), and the ``hidden`` messages (ids): the versions not chosen and what followed them,
    reached through a switcher (and all on the full history page)."""

    switches: dict[int, VersionSwitch]
    hidden: frozenset[int]


def session_version_layout(*, session: Session) -> VersionLayout:
    """The chat page's versions: of each message with other versions, the one in the context is shown
    with its switcher and the others are hidden with what followed each (the messages that left the
    context with it: its context version, at or after its position, as message_version_choose says).
    A version group none of whose versions is in the context is hidden when it lies in a hidden tail
    (it is reached by switching that tail back) and shown as before otherwise."""
    fields = ("id", "position", "version_of_id", "excluded_from_context", "context_version")
    members = list(
        Message.objects.filter(session=session)
        .filter(Q(version_of__isnull=False) | Q(versions__isnull=False))
        .distinct()
        .only(*fields)
        .order_by("position")
    )
    groups: dict[int, list[Message]] = {}
    for member in members:
        groups.setdefault(member.version_of_id or member.pk, []).append(member)
    left_at = {m.context_version for m in members if m.excluded_from_context}
    excluded = list(
        Message.objects.filter(session=session, excluded_from_context=True, context_version__in=left_at).values_list(
            "id", "position", "context_version"
        )
    )
    switches: dict[int, VersionSwitch] = {}
    hidden: set[int] = set()
    # A version's group starts after the versions of the messages before it: in this order, a group
    # inside a hidden tail is known to be hidden when it comes.
    for versions in sorted(groups.values(), key=lambda group: group[0].position):
        chosen = next((v for v in versions if not v.excluded_from_context), None)
        if chosen is None and not any(v.pk in hidden for v in versions):
            continue
        for version in versions:
            if version is not chosen:
                hidden.update(
                    pk
                    for pk, position, left in excluded
                    if left == version.context_version and position >= version.position
                )
        if chosen is not None:
            number = versions.index(chosen)
            switches[chosen.pk] = VersionSwitch(
                number=number + 1,
                count=len(versions),
                previous_id=versions[number - 1].pk if number > 0 else None,
                next_id=versions[number + 1].pk if number + 1 < len(versions) else None,
            )
    return VersionLayout(switches=switches, hidden=frozenset(hidden))


def session_latest_message(*, session: Session, layout: VersionLayout | None = None) -> Message | None:
    """The conversation's latest message as the chat page shows it: the last of the history but the
    versions not chosen and what followed them (``layout``: session_version_layout's, when the caller
    has it). After going back to an earlier version of the last reply, that version: the one Regenerate,
    Continue and Retry act on."""
    hidden = (layout or session_version_layout(session=session)).hidden
    return Message.objects.filter(session=session).exclude(pk__in=hidden).order_by("-position").first()


@dataclass(frozen=True)
class ModelFacts:
    """What the backend knows of a model: its parameter size (billions) and native context
    length; None where it cannot say, or cannot be asked now."""

    parameter_size_b: float | None = None
    context_length: int | None = None


def model_facts(*, model: str, gateway: Gateway | None = None, served: bool = True) -> ModelFacts:
    """Ask the backend about ``model``. Ollama down or slow: nothing is known, and the session
    is still made (its first turn says what is wrong).

    Raises ValidationError for a model no enabled backend has, unless ``served`` is False (the
    model a session has already, or an imported file's: data is never refused for a setting;
    ``model_availability`` then tells that the model is not available, and nothing is known of it).
    """
    model = model.strip()
    if not model:
        return ModelFacts()  # session_create says what is wrong with it
    try:
        info = async_to_sync((gateway or get_gateway()).model_info)(model)
    except ModelNotFound as exc:
        if not served:
            return ModelFacts()
        raise ValidationError({"model": str(exc)}) from exc
    except LLMError:
        return ModelFacts()
    return ModelFacts(parameter_size_b=info.parameter_size_b, context_length=info.context_length)


def model_takes_tools(*, model: str, gateway: Gateway | None = None) -> bool:
    """Whether the backend's ``model`` has the "tools" capability (Ollama's /api/show says so of a model
    whose template takes tools): only such a model is given a request's tools. False when it cannot be asked.
    The answer is kept MODEL_TOOLS_SECONDS in the cache: Open WebUI sends tools with every chat turn."""
    gateway = gateway or get_gateway()
    key = f"ollm:model-tools:{models_served_key(gateway)}:{model.strip()}"
    cached = cache.get(key)
    if cached is not None:
        return bool(cached)
    try:
        info = async_to_sync(gateway.model_info)(model.strip())
    except LLMError:
        return False  # not kept: the backend may answer the next request
    takes = "tools" in info.capabilities
    cache.set(key, takes, MODEL_TOOLS_SECONDS)
    return takes


def backend_status() -> BackendStatus:
    """Which backend answers now, and its default model (for the pages' banner and the terminal)."""
    return async_to_sync(get_gateway().status)()


def model_hosts() -> list[HostReport]:
    """Each model host, asked now whether it answers, with its queue and recent failures."""
    return async_to_sync(get_gateway().hosts_report)()


def models_available() -> list[ModelInfo]:
    """Every model of every backend that answers now. Raises LLMError when none can be asked."""
    return async_to_sync(get_gateway().list_models)()


def model_names() -> list[str]:
    """The names of ``models_available``; none when no backend can be asked now."""
    try:
        return [info.name for info in models_available()]
    except LLMError:
        return []


# How long the list of served models is reused to tell whether a session's model is available
# (the chat page, every session the API shows): Ollama coming back, or a model pulled, shows
# within this many seconds, and a turn asks again before it refuses.
MODELS_SERVED_SECONDS = 10
# A model's capabilities change only when it is pulled again.
MODEL_TOOLS_SECONDS = 60


def models_served_key(gateway: Gateway) -> str:
    """One cache entry per gateway configuration: the same settings get the same answer in every process."""
    return "ollm:models-served:" + "|".join([gateway.mode, *(host.url for host in gateway.hosts)])


def models_served(*, gateway: Gateway | None = None, refresh: bool = False) -> list[str]:
    """The names of the models the backends serve now, kept MODELS_SERVED_SECONDS in the cache
    (``refresh`` asks again); none when no backend answers."""
    gateway = gateway or get_gateway()
    key = models_served_key(gateway)
    if not refresh:
        cached = cache.get(key)
        if cached is not None:
            return list(cached)
    try:
        names = [info.name for info in async_to_sync(gateway.list_models)()]
    except LLMError:
        names = []
    cache.set(key, names, MODELS_SERVED_SECONDS)
    return names


def _is_served(model: str, served: list[str]) -> bool:
    # Ollama lists an untagged name with its default tag.
    return model in served or (":" not in model and f"{model}:latest" in served)


@dataclass(frozen=True)
class ModelAvailability:
    """Whether a session's model is served here now, derived when read (never stored: Ollama
    may come back, a model may be pulled). ``available`` is None when no backend answers at
    all (nothing can be told; the backend banner and the turn's error say what is down).
    ``served``: the models to switch to. ``reason`` (when asked for): why it is not available,
    and ``backend_down`` when only because its backend does not answer."""

    model: str
    available: bool | None
    served: tuple[str, ...]
    reason: str = ""
    backend_down: bool = False

    def page_refusal(self) -> str:
        """The same on the chat page, for the person chatting: what to do there, without the
        operator's details (environment variables, commands) or the API's."""
        return (
            f"The model of this session, {self.model}, is not available on this server now. Your message is "
            f"saved. Choose one that is ({', '.join(self.served)}) with Switch model on the chat page, then Retry."
        )

    def refusal(self, *, session_id: Any) -> str:
        """What a turn on a session whose model is not available answers: the model, why, and how to
        switch (``available`` is False only when some model is served)."""
        why = f": {self.reason}" if self.reason else ""
        return (
            f"The model of this session, {self.model}, is not available here{why}. Your message is saved. "
            f"Switch the session to a model served here ({', '.join(self.served)}) with Switch model on the "
            f'chat page, or with PATCH /api/sessions/{session_id} {{"model": "{self.served[0]}"}}, then retry.'
        )


def model_availability(
    *, model: str, gateway: Gateway | None = None, refresh: bool = False, with_reason: bool = False
) -> ModelAvailability:
    """Whether ``model`` is served now (``models_served``); ``with_reason`` asks the backend why
    not, when it is not."""
    gateway = gateway or get_gateway()
    served = models_served(gateway=gateway, refresh=refresh)
    if not served:
        return ModelAvailability(model=model, available=None, served=())
    if _is_served(model, served):
        return ModelAvailability(model=model, available=True, served=tuple(served))
    reason, down = async_to_sync(gateway.unavailable_reason)(model) if with_reason else ("", False)
    return ModelAvailability(model=model, available=False, served=tuple(served), reason=reason, backend_down=down)


class ModelUnavailable(ModelNotFound):
    """The session's model is not served here now (an imported file's model, Ollama turned off
    or down): the message names it and how to switch. ``backend_down``: only because its backend
    does not answer (it may come back by itself)."""

    def __init__(self, message: str, *, page_message: str, backend_down: bool) -> None:
        super().__init__(message)
        self.page_message = page_message
        self.backend_down = backend_down


def model_require_available(*, session: Session, gateway: Gateway) -> None:
    """Refuse the reply when no backend serves the session's model. The served list is the
    cached one when it has the model; one that does not is asked again before refusing, so a
    model back a moment ago is not refused. Nothing is refused when no backend answers at all:
    the backend's own error says what is down."""
    availability = model_availability(model=session.model, gateway=gateway)
    if availability.available is False:
        availability = model_availability(model=session.model, gateway=gateway, refresh=True, with_reason=True)
    if availability.available is False:
        raise ModelUnavailable(
            availability.refusal(session_id=session.pk),
            page_message=availability.page_refusal(),
            backend_down=availability.backend_down,
        )
