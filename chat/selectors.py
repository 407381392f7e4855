"""Reads of chat sessions, always scoped to the user who asks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from chat.models import Message, Session
from contextmgr.llm import BackendStatus, Gateway, HostReport, LLMError, ModelInfo, ModelNotFound, get_gateway

# How many of the latest messages the chat page shows; "earlier" pages back by as many (a search hit
# further back is shown in its own window). Rendering is what a page costs: 100 keep a long
# session's page well under 200 ms of server time (bench/page_load.py).
HISTORY_WINDOW = 100


def sessions_for_user(*, user: Any) -> QuerySet[Session]:
    """The sessions a user may see: their own, most recently active first."""
    return Session.objects.filter(owner=user).order_by("-last_activity")


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


def session_history(*, session: Session) -> QuerySet[Message]:
    """The full history in order, with the checkpoint that covers each compressed message."""
    return Message.objects.filter(session=session).select_related("compressed_into").order_by("position")


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
