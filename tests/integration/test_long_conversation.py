"""Long conversations with the real embedded model: the prompt never exceeds
num_ctx, what must never be compressed is always in it, checkpoints age."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from chat.models import Checkpoint, CheckpointRevision, ContextEvent, Message, Session
from chat.selectors.context import session_last_event_id
from chat.services.compression import compression_wait
from chat.services.goals import decision_record, goal_create
from chat.services.sessions import session_create
from chat.services.turn import TurnSend, turn_take
from engine.core.aging import Level
from engine.core.recall import RECALL_HEADING
from engine.llm.embedded import MODEL_NAME
from engine.llm.gateway import Gateway
from engine.llm.hosts import OnQueued
from engine.llm.types import ChatMessage, ChatRequest, ChatStream
from tests.factories import GREEDY_REPLIES
from tests.support.timing import scaled

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.long_model]

TOPICS = ["the login form", "password hashing", "JWT expiry", "refresh tokens", "rate limits", "audit logs"]
LOCKED = "Use JWT for authentication"


class RecordingGateway(Gateway):
    """The real gateway, noting the exact size of every prompt it sends."""

    def __init__(self, embedded) -> None:
        super().__init__(mode="embedded", embedded=embedded, ollama=None)
        self.calls: list[tuple[list[ChatMessage], int, int, int]] = []

    def send(self, request: ChatRequest, *, on_queued: OnQueued | None = None) -> ChatStream:
        assert self.embedded is not None
        exact = self.embedded.count_prompt_tokens(request.messages)
        self.calls.append((list(request.messages), exact, request.max_tokens, request.num_ctx))
        return super().send(request, on_queued=on_queued)


@pytest.fixture
def recording_gateway(embedded_backend, monkeypatch):
    """A ``RecordingGateway`` to the embedded model, also for the turns' compressions."""
    gateway = RecordingGateway(embedded_backend)
    monkeypatch.setattr("chat.services.compression.run.get_gateway", lambda: gateway)
    monkeypatch.setattr("chat.services.turn.take.get_gateway", lambda: gateway)
    return gateway


def pinned_session(user, *, context_size: int) -> Session:
    """A session with a goal and a locked decision, which every prompt must carry verbatim."""
    session = session_create(
        owner=user,
        model=MODEL_NAME,
        context_size=context_size,
        system_prompt="You are a concise security engineer.",
        # Short summaries (about a tenth of the squeezed window) keep each compression quick.
        settings={"compression": {"summary_max_tokens": 96}},
    )
    goal = goal_create(session=session, description="Harden the login flow", priority="high")
    decision_record(session=session, description=LOCKED, locked=True, goal=goal)
    return session


def assert_history_intact(session: Session, sent: list[str]) -> None:
    """The full history holds every message, unchanged, and no compression failed."""
    stored = list(
        Message.objects.filter(session=session, role="user").order_by("position").values_list("content", flat=True)
    )
    assert stored == sent
    assert Message.objects.filter(session=session, role="assistant").count() == len(sent)
    assert not ContextEvent.objects.filter(session=session, type="compression-error").exists()


def chat_turns(session: Session, gateway: RecordingGateway, turns: int) -> list[str]:
    sent = []
    before = session_last_event_id(session=session)
    for index in range(turns):
        text = f"{index}: explain {TOPICS[index % len(TOPICS)]} in detail."
        before = session_last_event_id(session=session)
        async_to_sync(turn_take)(session_id=session.pk, variant=TurnSend(text), gateway=gateway)
        sent.append(text)
    # Let a compression that the last turn made due finish, even one not started yet: its
    # writes must land before the test's database is emptied.
    settled = async_to_sync(compression_wait)(session_id=session.pk, timeout=scaled(600), after_event_id=before)
    assert settled, "a compression still holds the session"
    return sent


def assert_every_prompt_kept_what_matters(session, gateway, sent, *, num_ctx):
    """Every call fits num_ctx with its reply cap, carries the goal and the locked
    decision verbatim, and carries the user's messages verbatim: all of them until
    a rollover moves the oldest behind the ultra checkpoint, never one from the middle."""
    calls = chat_calls(gateway)
    assert len(calls) == len(sent)
    rolled = False
    for index, (messages, exact, max_tokens, call_ctx) in enumerate(calls):
        assert call_ctx == num_ctx
        assert exact + max_tokens <= num_ctx
        assert "ACTIVE GOAL: Harden the login flow" in messages[0].content
        assert f"🔒 {LOCKED}" in messages[0].content
        user_texts = [m.content for m in messages if m.role == "user"]
        # The newest message may follow what the history recalls for it, in the same message.
        if user_texts[-1] != sent[index]:
            assert user_texts[-1].startswith(RECALL_HEADING)
            assert user_texts[-1].endswith("\n\n" + sent[index])
            user_texts[-1] = sent[index]
        oldest_kept = index + 1 - len(user_texts)
        assert user_texts == sent[oldest_kept : index + 1]
        rolled = rolled or oldest_kept > 0
        if not rolled:
            assert user_texts == sent[: index + 1]
    has_rollover = ContextEvent.objects.filter(session=session, type="rollover-complete").exists()
    assert rolled <= has_rollover  # user messages left the prompt only through a rollover


def chat_calls(gateway: RecordingGateway) -> list[tuple[list[ChatMessage], int, int, int]]:
    """The chat replies (summaries and aging prompts are single user messages without a system one)."""
    return [call for call in gateway.calls if call[0][0].role == "system"]


# Both windows are squeezed to 1,000 tokens so that compressions come every few turns (the same
# steps as in a large window, with fewer turns between them). Measured on 2026-12-06: at Tier 3 the
# first compression came at turn 11 and the checkpoints had been at every level by turn 19; at 2K
# the second rollover came at turn 15. The turn counts below leave a margin over those.
SQUEEZED = 1000


@override_settings(
    OLLM_REPLY_MAX_TOKENS=80,
    OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES,
    OLLM_MODEL_CONTEXT_OVERRIDES={MODEL_NAME: {16384: SQUEEZED}},
)
def test_a_long_conversation_in_a_tier_three_window_ages_checkpoints(user, recording_gateway):
    # A 16K selection (Tier 3: three checkpoints) squeezed to 1,000 tokens for the embedded model.
    session = pinned_session(user, context_size=16384)
    assert (session.max_tokens, session.tier) == (SQUEEZED, 3)
    sent = chat_turns(session, recording_gateway, 24)

    assert_every_prompt_kept_what_matters(session, recording_gateway, sent, num_ctx=SQUEEZED)
    session.refresh_from_db()
    assert session.compression_count >= 3
    levels_seen = set(CheckpointRevision.objects.filter(checkpoint__session=session).values_list("level", flat=True))
    assert {Level.RECENT, Level.OLD, Level.ANCIENT, Level.ULTRA} <= levels_seen
    for checkpoint in Checkpoint.objects.filter(session=session):
        tokens = [r.tokens for r in checkpoint.revisions.order_by("id") if r.reason == "aged"]
        assert tokens == sorted(tokens, reverse=True)
    assert_history_intact(session, sent)


@override_settings(
    OLLM_REPLY_MAX_TOKENS=60,
    OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES,
    OLLM_MODEL_CONTEXT_OVERRIDES={MODEL_NAME: {2048: SQUEEZED}},
)
def test_a_long_conversation_at_2k_rolls_over(user, recording_gateway):
    # The 2K selection (Tier 1: no checkpoints, it rolls over) squeezed to 1,000 tokens.
    session = pinned_session(user, context_size=2048)
    assert (session.max_tokens, session.tier) == (SQUEEZED, 1)
    sent = chat_turns(session, recording_gateway, 20)

    assert_every_prompt_kept_what_matters(session, recording_gateway, sent, num_ctx=SQUEEZED)
    assert ContextEvent.objects.filter(session=session, type="rollover-complete").count() >= 2
    # Tier 1 keeps no level-3/2/1 checkpoints: everything lives in one ultra checkpoint.
    active = Checkpoint.objects.filter(session=session, merged_into__isnull=True, retired=False)
    assert [cp.level for cp in active] == [Level.ULTRA]
    assert_history_intact(session, sent)
