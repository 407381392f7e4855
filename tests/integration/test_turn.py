"""One chat turn with the real embedded model."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.utils import timezone

from chat.models import Checkpoint, ContextEvent, Goal, Message, Session
from chat.selectors.context import session_budget, session_context
from chat.services.compression import CompressionOutcome, compression_wait
from chat.services.goals import goal_create
from chat.services.messages import message_create
from chat.services.revisions import message_leave_context
from chat.services.sessions import session_update
from chat.services.turn import TurnContinue, TurnRetry, TurnSend, TurnStop, TurnStopped, take, turn_run, turn_take
from chat.services.turn.room import EXTRACTIVE_AFTER_FAILURE, EXTRACTIVE_AFTER_WAIT, WAITING_FOR_COMPRESSION
from engine.core.budget import prompt_room
from engine.llm.embedded import MODEL_NAME
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from engine.llm.types import ContextOverflow, LLMError, ModelNotFound
from tests.factories import GREEDY_REPLIES, LOGIN_ANSWER, LOGIN_QUESTION
from tests.support.model_server import UNTAGGED_MODEL
from tests.support.timing import scaled

pytestmark = pytest.mark.django_db(transaction=True)


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=24)
async def test_a_turn_streams_and_stores_both_messages(small_session, embedded_gateway):
    deltas: list[str] = []

    async def collect(delta: str) -> None:
        deltas.append(delta)

    outcome = await turn_take(
        session_id=small_session.pk,
        variant=TurnSend("What is a context window?"),
        gateway=embedded_gateway,
        on_delta=collect,
    )
    assert outcome.user_message.position == 1
    assert outcome.assistant_message.position == 2
    assert outcome.assistant_message.content == "".join(deltas)
    assert len(deltas) >= 2
    assert outcome.prompt_exact
    assert outcome.result.prompt_tokens == outcome.prompt_tokens
    assert outcome.assistant_message.tokens_exact
    assert outcome.assistant_message.done_reason in {"stop", "length"}
    assert outcome.cut_by_cap == (outcome.assistant_message.done_reason == "length")


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=8)
async def test_markers_that_cannot_be_applied_do_not_fail_a_stored_reply(small_session, embedded_gateway, monkeypatch):
    def broken(**options):
        raise ValidationError({"description": "too long"})

    monkeypatch.setattr("chat.services.turn.take.goal_apply_markers", broken)
    outcome = await turn_take(session_id=small_session.pk, variant=TurnSend("Say hello."), gateway=embedded_gateway)
    assert outcome.markers_applied == 0
    roles = [m.role async for m in Message.objects.filter(session=small_session).order_by("position")]
    assert roles == ["user", "assistant"]
    assert outcome.context.budget.active_tokens == outcome.user_message.tokens + outcome.assistant_message.tokens


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=4)
async def test_a_reply_cut_by_the_cap_says_so(small_session, embedded_gateway):
    outcome = await turn_take(
        session_id=small_session.pk, variant=TurnSend("Describe the history of Rome."), gateway=embedded_gateway
    )
    assert outcome.cut_by_cap
    assert outcome.result.completion_tokens == 4
    assert (await Message.objects.aget(pk=outcome.assistant_message.pk)).done_reason == "length"


async def test_with_compression_off_an_overflowing_message_is_refused_but_kept(user, embedded_gateway):
    session = await Session.objects.acreate(
        owner=user,
        title="t",
        model=MODEL_NAME,
        context_size=2048,
        max_tokens=1700,
        settings={"compression": {"enabled": False}},
    )
    earlier = await sync_to_async(message_create)(session=session, role="user", content="Please read this. " * 250)
    text = "And this too. " * 250  # fits alone, not beside the earlier message
    with pytest.raises(ContextOverflow, match="compression is turned off"):
        await turn_take(session_id=session.pk, variant=TurnSend(text), gateway=embedded_gateway)
    assert [m.content async for m in Message.objects.filter(session=session)] == [earlier.content, text]


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=16)
async def test_a_message_larger_than_the_context_is_kept_in_the_history_only(small_session, embedded_gateway):
    await turn_take(
        session_id=small_session.pk, variant=TurnSend("Where do tides come from?"), gateway=embedded_gateway
    )
    text = "A very long paste. " * 500
    with pytest.raises(ContextOverflow, match="Your message does not fit"):
        await turn_take(session_id=small_session.pk, variant=TurnSend(text), gateway=embedded_gateway)
    refused = await Message.objects.aget(session=small_session, content=text)
    assert refused.excluded_from_context
    # Nothing was compressed in a hopeless attempt to make room for it.
    assert (await Session.objects.aget(pk=small_session.pk)).compression_count == 0
    with pytest.raises(ValidationError, match="kept in the history only"):
        await turn_take(session_id=small_session.pk, variant=TurnRetry(), gateway=embedded_gateway)

    outcome = await turn_take(
        session_id=small_session.pk, variant=TurnSend("And what about waves?"), gateway=embedded_gateway
    )
    assert outcome.prompt_tokens < 300  # the paste (about 2,500 tokens) is not in the prompt
    assert (await Session.objects.aget(pk=small_session.pk)).compression_count == 0
    assert await Message.objects.filter(session=small_session).acount() == 5


async def test_a_compression_that_fails_even_extractively_keeps_the_message_in_the_context(
    small_session, embedded_gateway, monkeypatch
):
    await sync_to_async(message_create)(session=small_session, role="user", content="Some background. " * 250)
    # Only the turn's own attempts to make room run, and every one fails (a bug, not the model).
    monkeypatch.setattr("chat.services.turn.take.compression_maybe_schedule", lambda **options: False)
    asked: list[str | None] = []

    def failing(**options) -> CompressionOutcome:
        asked.append(options["extractive"])
        return CompressionOutcome("error", "boom")

    monkeypatch.setattr("chat.services.turn.room._compress_now", failing)
    text = "A long question. " * 300  # fits alone, not beside the background
    with pytest.raises(LLMError, match=r"the extractive compression failed \(boom\); your message is saved"):
        await turn_take(session_id=small_session.pk, variant=TurnSend(text), gateway=embedded_gateway)
    assert asked == [None, "the model's compression failed (boom)", "the model's compression failed (boom)"], (
        "the model's compression, then the extract's, then the extract's rollover"
    )
    stored = await Message.objects.aget(session=small_session, content=text)
    assert not stored.excluded_from_context  # Retry can still answer it


@override_settings(
    OLLM_COMPRESSION_TURN_WAIT_SECONDS=0.3, OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=8
)
async def test_a_turn_that_waited_its_fill_for_a_running_compression_makes_room_extractively(
    small_session, embedded_gateway
):
    await sync_to_async(message_create)(session=small_session, role="user", content="Some background. " * 250)
    # A compression holds the session and never ends (its worker is stuck on the model).
    await Session.objects.filter(pk=small_session.pk).aupdate(compression_started_at=timezone.now())
    text = "A long question. " * 300  # fits alone, not beside the background
    waits: list[str] = []

    async def on_wait(why: str) -> None:
        waits.append(why)

    outcome = await turn_take(
        session_id=small_session.pk, variant=TurnSend(text), gateway=embedded_gateway, on_wait=on_wait
    )
    assert waits == [WAITING_FOR_COMPRESSION, EXTRACTIVE_AFTER_WAIT], "each said once, however long the wait"
    assert outcome.prompt_tokens <= prompt_room(small_session.max_tokens)
    event = await ContextEvent.objects.filter(
        session=small_session, type__in=("compressed", "rollover-complete")
    ).alast()
    assert event is not None
    assert event.payload["how"] == "extractive: the model's compression did not finish within 0.3 s"
    assert not (await Session.objects.aget(pk=small_session.pk)).compression_started_at, "the lease is given back"


async def test_an_unknown_model_keeps_the_message(user, embedded_gateway):
    session = await Session.objects.acreate(
        owner=user, title="t", model="mistral:7b", context_size=8192, max_tokens=6800
    )
    with pytest.raises(ModelNotFound):
        await turn_take(session_id=session.pk, variant=TurnSend("hello?"), gateway=embedded_gateway)
    stored = await Message.objects.aget(session=session)
    assert (stored.content, stored.tokens_exact) == ("hello?", False)


async def test_empty_input_stores_nothing(small_session, embedded_gateway):
    with pytest.raises(ValidationError, match="The message is empty"):
        await turn_take(session_id=small_session.pk, variant=TurnSend("   "), gateway=embedded_gateway)
    assert not await Message.objects.filter(session=small_session).aexists()


def _fresh_context(session_id):
    return session_context(session=Session.objects.get(pk=session_id))


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=12)
async def test_the_turns_context_is_what_a_fresh_read_finds(small_session, embedded_gateway):
    await sync_to_async(message_create)(session=small_session, role="user", content="Some background. " * 20)
    outcome = await turn_take(
        session_id=small_session.pk, variant=TurnSend("What is a context window?"), gateway=embedded_gateway
    )
    fresh = await sync_to_async(_fresh_context)(small_session.pk)
    assert outcome.context == fresh
    assert fresh.budget.active_tokens == sum([m.tokens async for m in Message.objects.filter(session=small_session)])


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=12)
async def test_a_goal_set_while_the_reply_streams_shows_in_the_turns_context(small_session, embedded_gateway):
    async def set_goal(delta: str) -> None:
        if not await Goal.objects.filter(session=small_session).aexists():
            await sync_to_async(goal_create)(session=small_session, description="Ship the login form this week")

    outcome = await turn_take(
        session_id=small_session.pk, variant=TurnSend("Hello."), gateway=embedded_gateway, on_delta=set_goal
    )
    assert outcome.context.goal_tokens > 0
    assert outcome.context == await sync_to_async(_fresh_context)(small_session.pk)


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=12)
async def test_a_message_leaving_the_context_while_the_reply_streams_shows_in_the_turns_context(
    small_session, embedded_gateway
):
    earlier = await sync_to_async(message_create)(session=small_session, role="user", content="An aside. " * 30)

    async def drop_earlier(delta: str) -> None:
        if not (await Message.objects.aget(pk=earlier.pk)).excluded_from_context:
            await sync_to_async(message_leave_context)(message=earlier)

    outcome = await turn_take(
        session_id=small_session.pk, variant=TurnSend("Hello."), gateway=embedded_gateway, on_delta=drop_earlier
    )
    assert outcome.context.budget.active_tokens == outcome.user_message.tokens + outcome.assistant_message.tokens
    assert outcome.context == await sync_to_async(_fresh_context)(small_session.pk)


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=12)
async def test_a_context_size_changed_while_the_reply_streams_shows_in_the_turns_context(
    small_session, embedded_gateway
):
    async def resize(delta: str) -> None:
        await Session.objects.filter(pk=small_session.pk).aupdate(max_tokens=3000)

    outcome = await turn_take(
        session_id=small_session.pk, variant=TurnSend("Hello."), gateway=embedded_gateway, on_delta=resize
    )
    assert outcome.context.budget.max_tokens == 3000
    assert outcome.context == await sync_to_async(_fresh_context)(small_session.pk)


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=12)
async def test_a_system_prompt_edited_while_the_reply_streams_shows_in_the_turns_context(
    small_session, embedded_gateway
):
    async def edit(delta: str) -> None:
        if (await Session.objects.aget(pk=small_session.pk)).system_prompt != EDITED_SYSTEM_PROMPT:
            await sync_to_async(session_update)(session=small_session, system_prompt=EDITED_SYSTEM_PROMPT)

    outcome = await turn_take(
        session_id=small_session.pk, variant=TurnSend("Hello."), gateway=embedded_gateway, on_delta=edit
    )
    assert outcome.context.system_tokens == (await Session.objects.aget(pk=small_session.pk)).system_prompt_tokens
    assert outcome.context == await sync_to_async(_fresh_context)(small_session.pk)


EDITED_SYSTEM_PROMPT = "Answer as a ship's captain would, in short sentences, and name the weather first."


def _nearly_full(session: Session) -> None:
    """Questions and answers (with facts to keep) up to 85% of the room a prompt has, so a long
    question does not fit beside them: the older answers must be compressed first."""
    index = 0
    while session_budget(session=Session.objects.get(pk=session.pk)).active_tokens < 0.85 * prompt_room(
        session.max_tokens
    ):
        message_create(session=session, role="user", content=LOGIN_QUESTION.format(index=index))
        message_create(session=session, role="assistant", content=LOGIN_ANSWER * 2)
        index += 1


def _summarizer_fails(how: str, embedded_backend, fake_ollama, closed_port_url) -> tuple[Gateway, str]:
    """The embedded model answers the turn; its summaries go to an Ollama model that fails them:
    an Ollama that does not answer, or the stand-in holding every generation past the timeout. Neither
    summarizer's tag says it is a small model, so it is asked (a small one is asked for nothing)."""
    if how == "unreachable":
        return Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=closed_port_url)), "qwen:7b"
    fake_ollama.hold()
    return (
        Gateway(mode="auto", embedded=embedded_backend, ollama=OllamaBackend(host=fake_ollama.url, timeout=1)),
        UNTAGGED_MODEL,
    )


@pytest.mark.parametrize(("how", "error"), [("unreachable", "BackendUnavailable"), ("timeout", "LLMTimeout")])
@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=8, OLLM_COMPRESSION_RETRY_SECONDS="")
async def test_a_turn_whose_summaries_fail_makes_room_extractively_and_answers(
    small_session, embedded_backend, fake_ollama, closed_port_url, use_gateway, how, error
):
    gateway, summarizer = _summarizer_fails(how, embedded_backend, fake_ollama, closed_port_url)
    use_gateway(gateway)  # the background compressions the turn schedules too
    await Session.objects.filter(pk=small_session.pk).aupdate(summary_model=summarizer)
    await sync_to_async(_nearly_full)(small_session)
    waits: list[str] = []

    async def on_wait(why: str) -> None:
        waits.append(why)
        if why == EXTRACTIVE_AFTER_FAILURE:
            await asyncio.to_thread(fake_ollama.release)  # the reply is not held

    text = "Please explain it again. " * 60
    outcome = await turn_take(session_id=small_session.pk, variant=TurnSend(text), gateway=gateway, on_wait=on_wait)

    assert outcome.assistant_message.content
    assert not (await Message.objects.aget(pk=outcome.user_message.pk)).excluded_from_context
    assert EXTRACTIVE_AFTER_FAILURE in waits
    # The model's own count of the prompt it was sent left the room a reply needs.
    assert outcome.result.prompt_tokens <= prompt_room(small_session.max_tokens)
    assert outcome.result.prompt_tokens + outcome.result.completion_tokens <= small_session.max_tokens
    failure = await ContextEvent.objects.filter(session=small_session, type="compression-error").afirst()
    assert failure is not None
    assert failure.payload["error"] == error
    made_room = await ContextEvent.objects.filter(
        session=small_session, type__in=("compressed", "rollover-complete")
    ).afirst()
    assert made_room is not None
    assert made_room.payload["how"].startswith("extractive: the model's compression failed (")
    checkpoint = await Checkpoint.objects.aget(pk=made_room.payload["checkpoint"])
    assert checkpoint.strategy == "truncate"
    # The compression the reply may have scheduled writes nothing once the test's database is emptied.
    assert await compression_wait(session_id=small_session.pk, timeout=scaled(120), after_event_id=made_room.id)


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=8)
async def test_a_continued_reply_goes_on_from_where_it_ended_and_its_markers_count_once(
    small_session, embedded_gateway
):
    start = "[ARTIFACT] Created src/plan.md\nThe plan has three steps: first,"
    await sync_to_async(message_create)(session=small_session, role="user", content="Plan a small garden.")
    cut = await sync_to_async(message_create)(
        session=small_session, role="assistant", content=start, done_reason="length"
    )
    outcome = await turn_take(session_id=small_session.pk, variant=TurnContinue(), gateway=embedded_gateway)
    assert outcome.assistant_message.content.startswith(start)
    assert outcome.new_text == outcome.assistant_message.content[len(start) :]
    assert outcome.new_text.strip()
    # The marker in the part stored before was applied then: the continued reply does not count it again.
    assert outcome.markers_applied == 0
    await cut.arefresh_from_db()
    assert cut.excluded_from_context  # kept in the full history
    stored = [
        (m.role, m.excluded_from_context)
        async for m in Message.objects.filter(session=small_session).order_by("position")
    ]
    assert stored == [("user", False), ("assistant", True), ("assistant", False)]


async def test_only_the_latest_reply_can_be_continued(small_session, embedded_gateway):
    await sync_to_async(message_create)(session=small_session, role="user", content="Plan a small garden.")
    with pytest.raises(ValidationError, match="Only the latest reply"):
        await turn_take(session_id=small_session.pk, variant=TurnContinue(), gateway=embedded_gateway)


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=12)
def test_the_synchronous_turn_returns_it_settled(small_session, embedded_gateway, monkeypatch):
    """What moved the context once the reply was stored (a compression ending, a restore) is in the outcome:
    the turn's messages and context as they stand once it is over, as a fresh read finds them."""
    stored_reply = take._after_reply

    def then_the_message_leaves(session, *args, **kwargs):
        after = stored_reply(session, *args, **kwargs)
        question = Message.objects.get(session=session, role="user")
        message_leave_context(message=question)
        return after

    monkeypatch.setattr("chat.services.turn.take._after_reply", then_the_message_leaves)
    deltas: list[str] = []
    outcome = turn_run(
        session_id=small_session.pk,
        variant=TurnSend("What is a context window?"),
        gateway=embedded_gateway,
        on_delta=deltas.append,
    )
    session = Session.objects.get(pk=small_session.pk)
    assert outcome.assistant_message.content == "".join(deltas)
    assert outcome.user_message.excluded_from_context
    assert not outcome.assistant_message.excluded_from_context
    assert outcome.context_version == session.context_version
    assert outcome.context == _fresh_context(small_session.pk)
    assert outcome.context_changed_meanwhile
    assert not outcome.compression_running


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=12)
def test_a_synchronous_turn_that_nothing_moved_keeps_its_own_report(small_session, embedded_gateway, monkeypatch):
    # A checkpoint (its retention in the reliability), a goal and a message counted by estimate: each part of
    # the report the turn builds from the window it read before the reply, without reading the context again.
    goal_create(session=small_session, description="Plan the move to Lisbon")
    message_create(session=small_session, role="user", content="We move on 14 March. " * 8)
    Checkpoint.objects.create(
        session=small_session, number=1, level=3, first_position=1, last_position=1, summary="Moving on 14 March.",
        original_tokens=60, current_tokens=12, retention=0.5,
    )  # fmt: skip
    reads = []

    def read_again(**kw):
        reads.append(kw)
        return session_context(**kw)

    monkeypatch.setattr(take, "session_context", read_again)
    outcome = turn_run(session_id=small_session.pk, variant=TurnSend("Say hello."), gateway=embedded_gateway)
    assert reads == []
    assert not outcome.context.messages_exact
    assert outcome.context.reliability.context_confidence < 1
    assert not outcome.context_changed_meanwhile
    assert outcome.context_version == Session.objects.get(pk=small_session.pk).context_version
    assert outcome.context == _fresh_context(small_session.pk)
    assert not outcome.compression_running


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=24)
def test_a_stopped_synchronous_turn_keeps_the_part_of_the_reply_that_came(small_session, embedded_gateway):
    stop = TurnStop()
    deltas: list[str] = []

    def hear(delta: str) -> None:
        deltas.append(delta)
        if len(deltas) == 2:
            stop.stop()  # as the page's Stop does, from the socket's thread

    with pytest.raises(TurnStopped):
        turn_run(
            session_id=small_session.pk,
            variant=TurnSend("What is a context window?"),
            gateway=embedded_gateway,
            on_delta=hear,
            stop=stop,
        )
    stored = list(Message.objects.filter(session=small_session).order_by("position"))
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].done_reason == "cancelled"
    assert stored[1].content == "".join(deltas)
    assert len(deltas) == 2


@override_settings(OLLM_CONTEXT_DEFAULTS=GREEDY_REPLIES, OLLM_REPLY_MAX_TOKENS=24)
async def test_a_cancelled_turn_take_stops_the_turn_and_keeps_what_came(small_session, embedded_gateway):
    """The async shell: cancelling it (the page's Stop) stops the turn in its thread, and it raises only once
    the part of the reply that came is stored."""
    deltas: list[str] = []
    two = asyncio.Event()

    async def hear(delta: str) -> None:
        deltas.append(delta)
        if len(deltas) == 2:
            two.set()

    task = asyncio.create_task(
        turn_take(
            session_id=small_session.pk,
            variant=TurnSend("What is a context window?"),
            gateway=embedded_gateway,
            on_delta=hear,
        )
    )
    await asyncio.wait_for(two.wait(), timeout=scaled(60))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = [m async for m in Message.objects.filter(session=small_session).order_by("position")]
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].done_reason == "cancelled"
    assert stored[1].content == "".join(deltas)
