"""The compression coordinator on real data: the summaries come over real HTTP from
the Ollama stand-in (the real model, or a canned reply where a test needs a bad one) for a
model that is asked for them (``writer``); the served model is a small one (135M), which is
asked for none: its extract stands."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.test import override_settings
from django.utils import timezone

from chat.models import Checkpoint, ContextEvent, Decision, Message, Session, Snapshot
from chat.selectors.context import active_checkpoints, session_budget, session_window
from chat.services.compression import (
    compression_attempt,
    compression_maybe_schedule,
    compression_queued,
    compression_run,
    compression_wait,
)
from chat.services.events import event_record
from chat.services.goals import decision_record, goal_checkpoint_set, goal_create
from chat.services.messages import message_create
from chat.services.sessions import session_create, session_delete
from chat.tasks import compress_session
from engine.core.aging import Level
from engine.core.markers import CHECKPOINT_FILES, CHECKPOINT_NEXT_STEPS
from engine.core.prompts import INJECTION_GUARD
from engine.core.window import chat_messages
from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from engine.llm.gateway import Gateway
from engine.llm.ollama_backend import OllamaBackend
from tests.factories import (
    LOGIN_ANSWER,
    LOGIN_QUESTION,
    SMALL_MODEL_HOW,
    TIER2,
    WRITER_SIZE_B,
    converse,
    event_types,
    frozen,
    small_session,
    summary_requests,
    until_due,
)
from tests.support.model_server import SERVED_MODEL


@pytest.mark.django_db
def test_a_due_session_of_a_small_model_is_compressed_and_frees_room(due_session, gateway, fake_ollama):
    """SmolLM2-135M is a small model: it is asked for no summary, the extract of the messages'
    fact clauses stands; the checkpoint frees at least 30% of what it replaces and holds none of
    the prompt's scaffolding."""
    before = session_budget(session=due_session)
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert outcome.status == "compressed"
    assert outcome.reason == SMALL_MODEL_HOW
    assert summary_requests(fake_ollama) == []
    assert outcome.checkpoint_id is not None
    checkpoint = Checkpoint.objects.get(pk=outcome.checkpoint_id)
    assert checkpoint.level == Level.RECENT
    assert checkpoint.summary
    assert checkpoint.current_tokens <= 0.7 * checkpoint.original_tokens
    assert INJECTION_GUARD not in checkpoint.summary
    assert "PART 1" not in checkpoint.summary
    assert checkpoint.key_decisions == ["Use argon2 for passwords"]
    assert checkpoint.files_modified == ["src/auth/hash.ts"]
    compressed = Message.objects.filter(compressed_into=checkpoint)
    assert compressed.exists()
    assert set(compressed.values_list("role", flat=True)) == {"assistant"}
    after = session_budget(session=due_session)
    assert after.active_tokens < before.active_tokens
    assert not after.compression_due
    assert event_types(due_session) == ["auto-snapshot-created", "checkpoint-created", "compressed"]
    payload = ContextEvent.objects.get(session=due_session, type="compressed").payload
    assert payload["tokens_before"] == before.used
    assert payload["tokens_after"] == after.used
    assert Snapshot.objects.get(session=due_session).kind == "auto"
    # Every user message is still in the active context, verbatim.
    prompt_users = [c for r, c in chat_messages(session_window(session=due_session)) if r == "user"]
    assert prompt_users == [f"Question {i} about logins?" for i in range(18)]


@pytest.mark.django_db
def test_an_8k_session_ages_a_checkpoint_through_every_level(due_session, gateway, fake_ollama):
    """Tier 2 (8K) keeps three checkpoints besides the ultra one, so its first checkpoint steps
    3 -> 2 -> 1 -> ultra over four compressions instead of jumping to ultra at the second."""
    assert due_session.tier == 2
    fake_ollama.behaviour.canned_reply = "A recap of the login answers so far."
    levels = []
    turn = 100
    for _ in range(4):
        assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
        levels.append(Checkpoint.objects.get(session=due_session, number=1).level)
        turn = until_due(due_session, start=turn)
    assert levels == [Level.RECENT, Level.OLD, Level.ANCIENT, Level.ULTRA]
    assert [cp.level for cp in active_checkpoints(session=due_session)] == [
        Level.ULTRA,
        Level.ANCIENT,
        Level.OLD,
        Level.RECENT,
    ]


@pytest.mark.django_db
def test_the_window_sent_and_the_stored_budget_agree(due_session, gateway):
    """The window a turn sends holds exactly what the budget (pages, the API, the trigger) counts."""
    goal_create(session=due_session, description="Ship the login form")
    assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
    due_session.refresh_from_db()
    window = session_window(session=due_session)
    budget = session_budget(session=due_session)

    def tokens(kind: str) -> int:
        return sum(block.tokens for block in window if block.kind == kind)

    assert (tokens("system"), tokens("checkpoint"), tokens("message")) == (
        budget.system_prompt_tokens,
        budget.checkpoint_tokens,
        budget.active_tokens,
    )
    assert budget.checkpoint_tokens > 0
    assert budget.system_prompt_tokens > due_session.system_prompt_tokens, "the goal block is counted"


@pytest.mark.django_db
def test_waiting_for_a_compression_starts_from_the_callers_budget(due_session):
    """With no compression running, one is still to come while the budget says it is due."""
    due = session_budget(session=due_session)
    assert not async_to_sync(compression_wait)(session_id=due_session.pk, after_event_id=0, timeout=0)
    assert not async_to_sync(compression_wait)(session_id=due_session.pk, after_event_id=0, timeout=0, budget=due)
    settled = dataclasses.replace(due, active_tokens=0)
    assert async_to_sync(compression_wait)(session_id=due_session.pk, after_event_id=0, timeout=0, budget=settled)


@pytest.mark.django_db
def test_not_due_is_recorded_as_skipped(user, gateway):
    session = session_create(owner=user, model=SERVED_MODEL, context_size=8192)
    message_create(session=session, role="assistant", content="short")
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "skipped"
    assert "not needed" in outcome.reason
    assert event_types(session) == ["compression-skipped"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("behaviour", "error"),
    [({"fail_status": 500}, "HostFailed"), ({"delay_seconds": 1.0}, "LLMTimeout")],
)
def test_an_llm_failure_changes_nothing(writer, due_session, fake_ollama, behaviour, error):
    for name, value in behaviour.items():
        setattr(fake_ollama.behaviour, name, value)
    gateway = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=0.5))
    before = frozen(due_session)
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert outcome.status == "error"
    assert frozen(due_session) == before
    failure = ContextEvent.objects.get(session=due_session, type="compression-error")
    assert failure.payload["error"] == error
    assert not Checkpoint.objects.filter(session=due_session).exists()


@pytest.mark.django_db
def test_an_unreachable_llm_changes_nothing(writer, due_session, closed_port_url):
    gateway = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=closed_port_url))
    before = frozen(due_session)
    assert compression_run(session_id=due_session.pk, gateway=gateway).status == "error"
    assert frozen(due_session) == before
    reason = ContextEvent.objects.get(type="compression-error").payload["reason"]
    assert "not reachable" in reason
    assert "://" not in reason, "the owner reads it: no host's address (issue 49, item 4)"


@pytest.mark.django_db
def test_a_small_models_compression_needs_no_model_so_a_failing_one_fails_nothing(due_session, fake_ollama):
    """A small model is asked for no summary: its compression runs while the model fails every request,
    with nothing to retry."""
    fake_ollama.behaviour.fail_status = 500
    gateway = Gateway(mode="ollama", embedded=None, ollama=OllamaBackend(host=fake_ollama.url, timeout=0.5))
    outcome = compression_run(session_id=due_session.pk, gateway=gateway, attempt=1)
    assert (outcome.status, outcome.reason, outcome.retry_in) == ("compressed", SMALL_MODEL_HOW, None)
    assert not ContextEvent.objects.filter(session=due_session, type="compression-error").exists()
    assert summary_requests(fake_ollama) == []


@pytest.mark.django_db
@pytest.mark.parametrize(("reply", "why"), [("", "truncate: empty"), ("padding " * 400, "truncate: ")])
def test_an_empty_or_inflated_summary_falls_back_to_truncation(writer, due_session, gateway, fake_ollama, reply, why):
    fake_ollama.behaviour.canned_reply = reply
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert outcome.status == "compressed"
    assert outcome.reason.startswith(why)
    assert outcome.checkpoint_id is not None
    checkpoint = Checkpoint.objects.get(pk=outcome.checkpoint_id)
    assert checkpoint.strategy == "truncate"
    assert checkpoint.current_tokens < checkpoint.original_tokens
    assert "padding" not in checkpoint.summary
    assert ContextEvent.objects.get(type="compressed").payload["how"].startswith(why)


# What SmolLM2-135M writes when it loops (issue 23): one clause over and over, within its target.
LOOP = "The handler checks the token and logs the login. " * 4
CLEAN = "Logins are validated, hashed with argon2 and audited."


@pytest.mark.django_db
def test_a_looping_summary_is_asked_for_again_with_a_repeat_penalty_then_truncated(
    writer, due_session, gateway, fake_ollama
):
    fake_ollama.behaviour.canned_reply = LOOP.strip()  # the retry loops too
    assert gateway.token_counter(SERVED_MODEL).count(LOOP).tokens <= 48, "small enough for the inflation guard"
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert outcome.status == "compressed"
    assert outcome.reason.startswith("truncate: repetitive summary (a phrase of 9 words repeated 4 times: “the handler")
    assert "; with repeat penalty 1.3: repetitive summary (" in outcome.reason
    assert ContextEvent.objects.get(session=due_session, type="compressed").payload["how"] == outcome.reason
    assert outcome.checkpoint_id is not None
    checkpoint = Checkpoint.objects.get(pk=outcome.checkpoint_id)
    assert checkpoint.strategy == "truncate"
    # The extract of the compressed messages, not the loop.
    assert "checks the token" not in checkpoint.summary
    source = "\n".join(
        f"{m.role}: {m.content}" for m in Message.objects.filter(compressed_into=checkpoint).order_by("position")
    )
    assert checkpoint.summary
    assert all(line.removesuffix(" …") in source for line in checkpoint.summary.splitlines())
    first, retry = summary_requests(fake_ollama)[:2]
    assert "repeat_penalty" not in first["options"]
    assert retry["options"]["repeat_penalty"] == 1.3
    assert retry["messages"] == first["messages"], "the same prompt, asked again"


@pytest.mark.django_db
def test_a_small_model_is_not_asked_and_the_extract_of_fact_clauses_stands(due_session, gateway, fake_ollama):
    """Issue 45: a small model's summaries never kept more facts than the extract, so it is asked for
    none; the checkpoint is the extract of the messages' fact clauses, verbatim."""
    fake_ollama.behaviour.canned_reply = f"{INJECTION_GUARD}\nPART 1:\nThe conversation covered many topics in general."
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert (outcome.status, outcome.reason) == ("compressed", SMALL_MODEL_HOW)
    assert summary_requests(fake_ollama) == [], "the model is asked for nothing"
    assert outcome.checkpoint_id is not None
    checkpoint = Checkpoint.objects.get(pk=outcome.checkpoint_id)
    assert checkpoint.strategy == "truncate"
    assert "topics in general" not in checkpoint.summary
    sources = "\n".join(Message.objects.filter(compressed_into=checkpoint).values_list("content", flat=True))
    lines = checkpoint.summary.splitlines()
    assert lines
    assert all(line in sources for line in lines), "every line a clause of the messages, verbatim"
    assert ContextEvent.objects.get(session=due_session, type="compressed").payload["how"] == SMALL_MODEL_HOW


@pytest.mark.django_db
def test_a_small_model_is_asked_for_nothing_while_checkpoints_age_merge_and_roll_over(
    due_session, gateway, fake_ollama
):
    """Every summary a compression may ask for (the new checkpoint's, an aging one's, the merge into the ultra
    checkpoint, a rollover's) is the extract for a small model, without a request to it."""
    fake_ollama.behaviour.canned_reply = "A recap of the login answers so far."
    turn = 100
    for _ in range(4):  # Tier 2: the first checkpoint ages 3 -> 2 -> 1 -> ultra (a merge)
        assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"
        turn = until_due(due_session, start=turn)
    assert compression_run(session_id=due_session.pk, gateway=gateway, rollover=True).status == "rolled-over"
    assert summary_requests(fake_ollama) == []
    hows = [
        payload["how"]
        for payload in ContextEvent.objects.filter(
            session=due_session, type__in=["compressed", "rollover-complete"]
        ).values_list("payload", flat=True)
    ]
    assert hows == [SMALL_MODEL_HOW] * 5
    assert {cp.strategy for cp in Checkpoint.objects.filter(session=due_session)} == {"truncate"}


def test_the_scaffolding_a_model_echoes_is_taken_out_of_its_summary(due_session, gateway, fake_ollama):
    Session.objects.filter(pk=due_session.pk).update(model_parameter_size_b=WRITER_SIZE_B)  # not a small model
    fake_ollama.behaviour.canned_reply = f"{INJECTION_GUARD}\nPART 1:\nLogins hash passwords with argon2."
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert (outcome.status, outcome.reason) == ("compressed", "summarize")
    assert outcome.checkpoint_id is not None
    assert Checkpoint.objects.get(pk=outcome.checkpoint_id).summary == "Logins hash passwords with argon2."


def test_a_looping_summary_retried_clean_is_kept(due_session, gateway, fake_ollama):
    Session.objects.filter(pk=due_session.pk).update(model_parameter_size_b=WRITER_SIZE_B)  # not a small model
    fake_ollama.behaviour.canned_replies = [LOOP, CLEAN]
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert outcome.status == "compressed"
    assert outcome.reason.startswith("summarize: retried with repeat penalty 1.3 after a repetitive summary (")
    assert ContextEvent.objects.get(session=due_session, type="compressed").payload["how"] == outcome.reason
    assert outcome.checkpoint_id is not None
    checkpoint = Checkpoint.objects.get(pk=outcome.checkpoint_id)
    assert (checkpoint.strategy, checkpoint.summary) == ("summarize", CLEAN)
    assert [r["options"].get("repeat_penalty") for r in summary_requests(fake_ollama)[:2]] == [None, 1.3]


@pytest.mark.django_db
def test_a_database_error_in_the_final_transaction_changes_nothing(due_session, gateway, fake_ollama, monkeypatch):
    fake_ollama.behaviour.canned_reply = "Logins are validated and audited."

    def failing(**kwargs):
        if kwargs["type"] == "compressed":
            raise RuntimeError("disk I/O error")
        return event_record(**kwargs)

    monkeypatch.setattr("chat.services.checkpoints.event_record", failing)
    before = frozen(due_session)
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert (outcome.status, outcome.reason) == ("error", "disk I/O error")
    assert frozen(due_session) == before
    assert not Checkpoint.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_compressions_at_once_make_one_checkpoint(writer, due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = "Logins are validated and audited."
    fake_ollama.behaviour.delay_seconds = 0.5
    outcomes = []

    def compress() -> None:
        try:
            outcomes.append(compression_run(session_id=due_session.pk, gateway=gateway))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=compress) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(o.status for o in outcomes) == ["compressed", "skipped"]
    assert Checkpoint.objects.filter(session=due_session).count() == 1
    skipped = ContextEvent.objects.get(session=due_session, type="compression-skipped")
    assert skipped.payload["reason"] == "another compression of this session is running"
    due_session.refresh_from_db()
    assert due_session.compression_started_at is None


@pytest.mark.django_db
def test_a_lease_left_by_a_dead_worker_expires(due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = "Logins are validated and audited."
    Session.objects.filter(pk=due_session.pk).update(compression_started_at=timezone.now() - timedelta(minutes=11))
    assert compression_run(session_id=due_session.pk, gateway=gateway).status == "compressed"


@pytest.mark.django_db
def test_the_lease_read_from_the_row_agrees_with_the_lease_asked_for(due_session):
    from chat.services.lease import lease_acquire, lease_expires_in, lease_held_on

    def both() -> tuple[bool, bool]:
        session = Session.objects.get(pk=due_session.pk)
        return lease_held_on(session=session), lease_expires_in(session_id=due_session.pk) is not None

    assert both() == (False, False)
    assert lease_acquire(session_id=due_session.pk) is not None
    assert both() == (True, True)
    Session.objects.filter(pk=due_session.pk).update(compression_started_at=timezone.now() - timedelta(minutes=11))
    assert both() == (False, False), "a lease its dead worker left has expired"


@pytest.mark.django_db
def test_turned_off_compression_is_not_run(due_session, gateway):
    Session.objects.filter(pk=due_session.pk).update(settings={"compression": {"enabled": False}})
    outcome = compression_run(session_id=due_session.pk, gateway=gateway, force=True)
    assert outcome.reason == "compression is turned off for this session"
    assert not compression_maybe_schedule(session=Session.objects.get(pk=due_session.pk))


@pytest.mark.django_db
def test_the_celery_task_runs_a_compression(due_session, fake_ollama, monkeypatch, gateway):
    fake_ollama.behaviour.canned_reply = "Logins are validated and audited."
    monkeypatch.setattr("chat.services.compression.run.get_gateway", lambda: gateway)
    assert compress_session.apply(args=[str(due_session.pk), "test"]).get() == "compressed"


@pytest.mark.django_db
def test_no_second_compression_is_queued_while_one_runs(due_session, django_capture_on_commit_callbacks):
    from chat.services.lease import lease_acquire, lease_release

    token = lease_acquire(session_id=due_session.pk)
    assert token is not None

    def compressions(callbacks) -> int:
        return sum("compression_schedule" in callback.__qualname__ for callback in callbacks)

    with django_capture_on_commit_callbacks() as queued:
        assert not compression_maybe_schedule(session=Session.objects.get(pk=due_session.pk))
    assert compressions(queued) == 0
    lease_release(session_id=due_session.pk, token=token)
    with django_capture_on_commit_callbacks() as queued:
        assert compression_maybe_schedule(session=Session.objects.get(pk=due_session.pk))
    assert compressions(queued) == 1


@pytest.mark.django_db
def test_a_compression_the_budget_asks_for_twice_is_queued_once(
    due_session, fake_ollama, gateway, monkeypatch, django_capture_on_commit_callbacks
):
    # A turn stores the user's message and then the reply: both find the budget due before the first
    # compression has taken its lease, and the second request used to run only to be skipped.
    asked: list[object] = []
    monkeypatch.setattr("chat.services.compression.schedule.publish", asked.append)
    with django_capture_on_commit_callbacks(execute=True):
        assert compression_maybe_schedule(session=Session.objects.get(pk=due_session.pk))
        assert compression_maybe_schedule(session=Session.objects.get(pk=due_session.pk))
    assert len(asked) == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert not compression_maybe_schedule(session=Session.objects.get(pk=due_session.pk)), "still queued"
    assert len(asked) == 1
    fake_ollama.behaviour.canned_reply = "Logins are validated and audited."
    monkeypatch.setattr("chat.services.compression.run.get_gateway", lambda: gateway)
    assert compression_attempt(session_id=due_session.pk, reason="test").status == "compressed"
    assert not compression_queued(session_id=due_session.pk), "the run ended: nothing is queued any more"
    assert not ContextEvent.objects.filter(session=due_session, type="compression-skipped").exists()


@pytest.mark.django_db
def test_a_queued_compression_of_a_deleted_session_is_skipped(due_session):
    session_id = due_session.pk
    session_delete(session=due_session)
    assert compress_session.apply(args=[str(session_id), "test"]).get() == "skipped"


@pytest.mark.django_db
def test_goal_and_locked_decisions_survive_and_steer_the_summary(writer, due_session, gateway, fake_ollama):
    fake_ollama.behaviour.canned_reply = "Progress on logins."
    goal = goal_create(session=due_session, description="Ship secure logins", priority="high")
    decision_record(session=due_session, description="Argon2 only", locked=True, goal=goal)
    compression_run(session_id=due_session.pk, gateway=gateway)
    prompt = next(r for r in fake_ollama.behaviour.requests if r["path"] == "/api/chat")["messages"][0]["content"]
    assert prompt.startswith("ACTIVE GOAL: Ship secure logins\nPriority: high")
    assert "🔒 Argon2 only" in prompt
    system = chat_messages(session_window(session=due_session))[0][1]
    assert "ACTIVE GOAL: Ship secure logins" in system
    assert "🔒 Argon2 only" in system


@pytest.mark.django_db
def test_a_small_models_goal_session_is_compressed_by_the_extract_without_goal_updates(
    due_session, gateway, fake_ollama
):
    """With a goal set, a small model is still asked for nothing: no summary's goal markers are applied
    (the replies' were, when they arrived), and the goal and its locked decision stay as they were."""
    fake_ollama.behaviour.canned_reply = "[CHECKPOINT] Design the flow - COMPLETED\n[DECISION] Rate-limit logins"
    goal = goal_create(session=due_session, description="Ship secure logins", priority="high")
    goal_checkpoint_set(goal=goal, description="Design the flow", status="in-progress")
    decision_record(session=due_session, description="Argon2 only", locked=True, goal=goal)
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert (outcome.status, outcome.reason) == ("compressed", SMALL_MODEL_HOW)
    assert summary_requests(fake_ollama) == []
    assert "goal_updates" not in ContextEvent.objects.get(session=due_session, type="compressed").payload
    assert [(cp.description, cp.status) for cp in goal.checkpoints.all()] == [("Design the flow", "in-progress")]
    assert list(Decision.objects.filter(session=due_session).values_list("description", "locked")) == [
        ("Argon2 only", True)
    ]
    system = chat_messages(session_window(session=due_session))[0][1]
    assert "ACTIVE GOAL: Ship secure logins" in system


@pytest.mark.django_db
def test_a_lease_is_given_back_only_by_its_holder(due_session):
    from chat.services.lease import lease_acquire, lease_held, lease_release

    first = lease_acquire(session_id=due_session.pk)
    assert first is not None
    assert lease_acquire(session_id=due_session.pk) is None
    # The first holder's lease expires and a second job takes over ...
    Session.objects.filter(pk=due_session.pk).update(compression_started_at=first - timedelta(minutes=11))
    second = lease_acquire(session_id=due_session.pk)
    assert second is not None
    # ... so the first holder, finishing late, must not free the second's lease.
    lease_release(session_id=due_session.pk, token=first)
    assert lease_held(session_id=due_session.pk)
    lease_release(session_id=due_session.pk, token=second)
    assert not lease_held(session_id=due_session.pk)


@pytest.mark.django_db
def test_a_failed_rollover_after_a_compression_keeps_the_compression(due_session, gateway, fake_ollama, monkeypatch):
    fake_ollama.behaviour.canned_reply = "Logins are validated and audited."

    def failing_rollover(*args, **kwargs):
        raise RuntimeError("rollover broke")

    monkeypatch.setattr("chat.services.compression.run._rollover", failing_rollover)
    # No room after the compression: a rollover is due.
    monkeypatch.setattr("chat.services.compression.run.rollover_due", lambda budget: True)
    outcome = compression_run(session_id=due_session.pk, gateway=gateway)
    assert outcome.status == "compressed"
    assert Checkpoint.objects.filter(session=due_session).count() == 1
    error = ContextEvent.objects.get(session=due_session, type="compression-error")
    assert error.payload["reason"] == "the rollover after compression 1 failed: rollover broke"


@pytest.mark.django_db(transaction=True)
def test_a_renewed_lease_outlives_its_timeout_and_an_abandoned_one_expires(due_session):
    from chat.services.lease import LeaseHeartbeat, lease_acquire, lease_held, lease_release

    with override_settings(OLLM_COMPRESSION_LEASE_SECONDS=2):
        token = lease_acquire(session_id=due_session.pk)
        assert token is not None
        with LeaseHeartbeat(session_id=due_session.pk, token=token) as heartbeat:
            time.sleep(3)  # longer than the lease: only the renewals keep it
            assert lease_acquire(session_id=due_session.pk) is None
        assert heartbeat.token is not None
        assert heartbeat.token > token
        lease_release(session_id=due_session.pk, token=heartbeat.token)
        assert not lease_held(session_id=due_session.pk)

        # A job that died holding the lease renews nothing: it frees itself after the timeout.
        assert lease_acquire(session_id=due_session.pk) is not None
        assert lease_acquire(session_id=due_session.pk) is None
        time.sleep(2.2)
        assert not lease_held(session_id=due_session.pk)
        assert lease_acquire(session_id=due_session.pk) is not None


def two_k_session(user) -> Session:
    """A 2K session (Tier 1, 1,700 tokens): every compression is a rollover."""
    session = session_create(owner=user, model=SERVED_MODEL, context_size=2048, system_prompt="Be brief.")
    assert session.max_tokens == 1700
    assert session.profile.tier.rolls_over
    return session


def user_messages_left(session: Session, checkpoint_id: int) -> int:
    return Message.objects.filter(session=session, role="user", compressed_into_id=checkpoint_id).count()


@pytest.mark.django_db
def test_a_2k_rollover_with_assistant_output_to_take_keeps_every_user_message(user, gateway):
    """Issue 23: Tier 1 compresses assistant output first; the user's messages stay verbatim while
    they alone are under the trigger. The served model is a small one: the extract is the ultra checkpoint."""
    session = two_k_session(user)
    index = 0
    while not session_budget(session=session).compression_due:
        message_create(session=session, role="user", content=f"Question {index} about logins?")
        message_create(session=session, role="assistant", content=LOGIN_ANSWER * 2)
        index += 1
    message_create(session=session, role="user", content="And the audit log?")
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "rolled-over"
    assert outcome.checkpoint_id is not None
    rollover = ContextEvent.objects.get(session=session, type="rollover-complete").payload
    assert rollover["user_messages"] == 0
    assert rollover["messages"] > 0
    assert user_messages_left(session, outcome.checkpoint_id) == 0
    moved = Message.objects.filter(session=session, compressed_into_id=outcome.checkpoint_id)
    assert set(moved.values_list("role", flat=True)) == {"assistant"}
    prompt_users = [c for r, c in chat_messages(session_window(session=session)) if r == "user"]
    assert prompt_users == [f"Question {i} about logins?" for i in range(index)] + ["And the audit log?"]
    assert not session_budget(session=session).compression_due
    checkpoint = Checkpoint.objects.get(pk=outcome.checkpoint_id)
    assert checkpoint.level == Level.ULTRA


@pytest.mark.django_db
def test_a_2k_rollover_moves_user_messages_only_when_they_alone_reach_the_trigger(user, gateway):
    """Long user messages with short replies: once the user messages alone are over the trigger,
    the oldest of them leave the active context (they stay in the full history), and the event
    says how many."""
    session = two_k_session(user)
    note = "Here is my note about the login audit trail, the hashing and the session cookies. " * 4
    index = 0
    while not session_budget(session=session).compression_due:
        message_create(session=session, role="user", content=f"Note {index}: {note}")
        message_create(session=session, role="assistant", content="Noted.")
        index += 1
    message_create(session=session, role="user", content=f"Note {index}: {note}")
    user_tokens = sum(Message.objects.filter(session=session, role="user").values_list("tokens", flat=True))
    assert user_tokens >= session_budget(session=session).trigger_at
    history = list(Message.objects.filter(session=session).values_list("id", "content"))
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "rolled-over"
    assert outcome.checkpoint_id is not None
    rollover = ContextEvent.objects.get(session=session, type="rollover-complete").payload
    left = user_messages_left(session, outcome.checkpoint_id)
    assert rollover["user_messages"] == left > 0
    assert left < index + 1, "only as many as needed"
    # The conversation went oldest first, whatever the role: what stays is its newest stretch, the replies
    # between the user messages included.
    stayed = list(
        Message.objects.filter(session=session, compressed_into__isnull=True)
        .order_by("position")
        .values_list("position", "role")
    )
    assert [position for position, _ in stayed] == list(range(stayed[0][0], stayed[-1][0] + 1))
    assert [role for _, role in stayed].count("assistant") >= [role for _, role in stayed].count("user") - 1 > 0
    # The oldest user messages left, the newest stayed.
    active_users = [c for r, c in chat_messages(session_window(session=session)) if r == "user"]
    assert active_users == [f"Note {i}: {note}" for i in range(left, index + 1)]
    assert list(Message.objects.filter(session=session).values_list("id", "content")) == history
    assert not session_budget(session=session).compression_due


def _fact_dense(i: int) -> str:
    return (
        f"Ticket {1000 + i} went to Dr. Ames{i} in room {200 + i} on floor {i % 7}, "
        f"code K{i}Q{i * 3}, due {i % 28 + 1} May 2024."
    )


@pytest.mark.django_db
def test_a_checkpoint_its_first_fit_leaves_too_large_is_refitted_and_committed(user, gateway, monkeypatch):
    """The ledger is fitted in cl100k counts against the model's: when that estimate is off (here made
    twice too generous), the first checkpoint would free under 30% (13% here), and the ledger is refitted
    without what it went over by instead of the compression being refused (issue 47)."""
    monkeypatch.setattr("chat.services.compression.summaries.LEDGER_FIT_MARGIN", 2.0)
    session = small_session(user, context_size=TIER2, compression={"strategy": "truncate"})
    converse(session, 18, question=LOGIN_QUESTION, answer=_fact_dense)
    until_due(session, start=18)
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "compressed", outcome.reason
    assert outcome.checkpoint_id is not None
    checkpoint = Checkpoint.objects.get(pk=outcome.checkpoint_id)
    assert checkpoint.ledger, "the refit keeps a ledger, only a smaller one"
    assert checkpoint.current_tokens <= 0.7 * checkpoint.original_tokens
    assert not session_budget(session=session).compression_due


@pytest.mark.django_db
def test_a_compression_that_cannot_free_enough_rolls_over_and_ends_under_the_trigger(user, gateway):
    """Replies made of marker lines only: the checkpoint's decisions and files lines weigh as much as the
    replies themselves, so the first checkpoint of them does not free 30% (333 tokens into 383). The
    extract is made smaller until it does, and the session, still over its trigger, rolls over
    instead of staying stuck there (issue 47)."""
    session = small_session(user, context_size=TIER2, compression={"strategy": "truncate"})
    converse(
        session,
        12,
        question="Which part do we test next, and on which rig? " * 8 + "({index})",
        answer=lambda i: (
            f"[NEXT] Test part {i} on rig {i} with the load of {i * 10} kg\n[ARTIFACT] Created lib/part_{i}/v{i}.rs\n"
        ),
    )
    until_due(session, start=12)
    outcome = compression_run(session_id=session.pk, gateway=gateway)
    assert outcome.status == "rolled-over", outcome.reason
    assert not session_budget(session=session).compression_due
    assert not ContextEvent.objects.filter(session=session, type="compression-skipped").exists()
    # A smaller extract of the replies frees 30% of them, and what is left over the trigger rolls over.
    assert ContextEvent.objects.filter(session=session, type="rollover-complete").exists()


@pytest.mark.django_db
def test_a_hundred_marker_replies_at_8k_compress_under_the_trigger_with_the_models_own_counts(user, embedded_gateway):
    """110 replies of marker lines at 8K, counted by the bundled model's tokenizer: listed in full, their
    files and next steps made a checkpoint (or an ultra one) that freed 8% of them, so the session stayed
    stuck over its trigger (found in Chromium, issue 47). A checkpoint lists the newest files and next
    steps only, and the session ends under its trigger."""
    session = small_session(
        user, model=EMBEDDED_MODEL, context_size=8192, contexts=None, compression={"strategy": "truncate"}
    )
    converse(
        session,
        110,
        question="Which part do we test next, and on which rig? ({index})",
        answer=lambda i: (
            f"[NEXT] Test part {i} on rig {i} with the load of 10{i} kg\n[ARTIFACT] Created lib/part_{i}/v{i}.rs\n"
        ),
    )
    assert session_budget(session=session).compression_due
    outcome = compression_run(session_id=session.pk, gateway=embedded_gateway)
    assert outcome.status in ("compressed", "rolled-over"), outcome.reason
    assert not session_budget(session=session).compression_due
    checkpoint = active_checkpoints(session=session).last()
    assert checkpoint is not None
    last = Message.objects.filter(session=session, role="assistant", compressed_into__isnull=False).last()
    assert last is not None
    index = last.position // 2 - 1  # positions count from 1, a question then its answer
    assert checkpoint.files_modified[-1] == f"lib/part_{index}/v{index}.rs", "the newest file is listed"
    assert len(checkpoint.files_modified) == CHECKPOINT_FILES
    assert checkpoint.next_steps[-1] == f"Test part {index} on rig {index} with the load of 10{index} kg"
    assert len(checkpoint.next_steps) == CHECKPOINT_NEXT_STEPS
