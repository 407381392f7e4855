"""Issue 33: chat 0016, contextmgr 0010 and chat 0017 move the conversation domain's models from
contextmgr to chat without touching a table: rows written before the move read the same after it,
and after going back."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from chat.models import Checkpoint, ContextEvent, Decision, Goal, Message, Session, Snapshot

BEFORE = [("chat", "0015_client_tasks"), ("contextmgr", "0009_prompt_truncated_event")]
# The models moved, as the content type migration names them.
MOVED: list[str] = importlib.import_module("chat.migrations.0017_conversation_content_types").MOVED


def _migrate(targets: list[tuple[str, str]] | None = None) -> Any:
    """Migrate to ``targets`` (the latest migrations when None): the models of the state reached (an Apps,
    typed Any: the historical models are looked up by name at run time, not by the type checker)."""
    executor = MigrationExecutor(connection)
    targets = targets or executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    ContentType.objects.clear_cache()
    return MigrationExecutor(connection).loader.project_state(targets).apps


@pytest.fixture
def before_the_move():
    """The database as it was before the move; migrated to the latest again whatever the test did."""
    apps = _migrate(BEFORE)
    yield apps
    _migrate()


def _write(apps: Any, owner_id: int) -> dict[str, Any]:
    """A session with a message compressed into a checkpoint, a goal with a decision, a snapshot and
    an event, written by the models as contextmgr had them."""
    session = apps.get_model("chat", "Session").objects.create(
        owner_id=owner_id, title="Before the move", model="m", context_size=4096, max_tokens=4096
    )
    checkpoint = apps.get_model("contextmgr", "Checkpoint").objects.create(
        session=session, number=1, summary="What was said.", original_tokens=40, current_tokens=8, first_position=1
    )
    checkpoint.last_position = 1
    checkpoint.save()
    message = apps.get_model("chat", "Message").objects.create(
        session=session, position=1, role="user", content="Hello", tokens=2, compressed_into=checkpoint
    )
    goal = apps.get_model("contextmgr", "Goal").objects.create(session=session, description="Ship it")
    decision = apps.get_model("contextmgr", "Decision").objects.create(
        session=session, goal=goal, description="Use SQLite", locked=True
    )
    snapshot = apps.get_model("contextmgr", "Snapshot").objects.create(
        session=session,
        kind="manual",
        state={"messages": []},
        token_count=8,
        message_count=1,
        checkpoint_count=1,
        model="m",
        tier=1,
    )
    event = apps.get_model("contextmgr", "ContextEvent").objects.create(
        session=session, type="compressed", payload={"checkpoint": checkpoint.pk}
    )
    return {
        "session": session.pk,
        "checkpoint": checkpoint.pk,
        "message": message.pk,
        "goal": goal.pk,
        "decision": decision.pk,
        "snapshot": snapshot.pk,
        "event": event.pk,
    }


def _content_types_as_before() -> dict[str, int]:
    """The moved models' content types under contextmgr, as a database migrated before has them (a
    test database is created by the latest migrations, whose post_migrate put them under chat), each
    with a permission of its own: the ids of the contextmgr rows."""
    ContentType.objects.filter(app_label__in=["chat", "contextmgr"], model__in=MOVED).delete()
    ids = {}
    for model in MOVED:
        content_type = ContentType.objects.create(app_label="contextmgr", model=model)
        Permission.objects.create(content_type=content_type, codename=f"view_{model}", name=f"Can view {model}")
        ids[model] = content_type.pk
    return ids


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_move_read_the_same_after_it_and_after_going_back(before_the_move, django_user_model):
    owner = django_user_model.objects.create_user("mover", password="x")
    ids = _write(before_the_move, owner.pk)
    content_types = _content_types_as_before()

    _migrate()
    session = Session.objects.get(pk=ids["session"])
    message = Message.objects.get(pk=ids["message"])
    assert message.session == session
    checkpoint = message.compressed_into
    assert checkpoint == Checkpoint.objects.get(pk=ids["checkpoint"])
    assert checkpoint is not None
    assert checkpoint.summary == "What was said."
    assert list(session.checkpoints.values_list("pk", flat=True)) == [ids["checkpoint"]]
    decision = Decision.objects.get(pk=ids["decision"])
    assert decision.goal == Goal.objects.get(pk=ids["goal"])
    assert decision.locked
    assert Snapshot.objects.get(pk=ids["snapshot"]).state == {"messages": []}
    assert ContextEvent.objects.get(pk=ids["event"]).payload == {"checkpoint": ids["checkpoint"]}
    assert not ContentType.objects.filter(app_label="contextmgr", model__in=MOVED).exists()
    for model in MOVED:
        # The same rows, relabelled: their permissions follow.
        content_type = ContentType.objects.get(pk=content_types[model])
        assert content_type.app_label == "chat"
        assert Permission.objects.get(content_type=content_type).codename == f"view_{model}"
    assert ContentType.objects.get_for_model(Checkpoint).pk == content_types["checkpoint"]

    apps = _migrate(BEFORE)
    HistoricalMessage = apps.get_model("chat", "Message")
    assert HistoricalMessage.objects.get(pk=ids["message"]).compressed_into.summary == "What was said."
    assert apps.get_model("contextmgr", "Checkpoint").objects.get(pk=ids["checkpoint"]).messages.count() == 1
    decision = apps.get_model("contextmgr", "Decision").objects.get(pk=ids["decision"])
    assert decision.goal.description == "Ship it"
    assert apps.get_model("contextmgr", "Snapshot").objects.get(pk=ids["snapshot"]).message_count == 1
    assert apps.get_model("contextmgr", "ContextEvent").objects.get(pk=ids["event"]).type == "compressed"
    assert sorted(ContentType.objects.filter(app_label="contextmgr").values_list("pk", flat=True)) == sorted(
        content_types.values()
    )


@pytest.mark.django_db(transaction=True)
def test_a_content_type_chat_already_has_is_left_as_it_is(before_the_move):
    # Going back relabelled the test database's rows (post_migrate wrote them under chat) to contextmgr;
    # were a chat row written besides (post_migrate of the new code on the old state), neither is changed.
    old_row = ContentType.objects.get(app_label="contextmgr", model="checkpoint")
    chat_row = ContentType.objects.create(app_label="chat", model="checkpoint")
    _migrate()
    assert ContentType.objects.get(pk=old_row.pk).app_label == "contextmgr"
    assert ContentType.objects.get(pk=chat_row.pk).app_label == "chat"
    assert ContentType.objects.filter(app_label="chat", model__in=MOVED).count() == len(MOVED)
