"""Every snapshot holds every message's context state, not what changed since the previous one.

Before, ``state["messages"]`` was a delta (``base``, ``version``, ``changed``) on the snapshot
taken before it, so deleting one made every later snapshot unrestorable. Going forward the
chain of each session is replayed in the order it was taken (each delta was written on the
newest snapshot of its session then) and each snapshot gets the full ``states`` list. Where an
admin had already deleted a link, the states it changed are the ones of the snapshot before it:
the best still known. Going back writes each snapshot as a chain of one (``base`` None,
``version`` 0, every state ``changed``), which the old code restores exactly.
"""

from django.db import migrations

BATCH = 200


def chain_to_full(apps, schema_editor):
    Snapshot = apps.get_model("contextmgr", "Snapshot")
    Message = apps.get_model("chat", "Message")
    sessions = Snapshot.objects.order_by().values_list("session_id", flat=True).distinct()
    for session_id in list(sessions):
        positions = dict(Message.objects.filter(session_id=session_id).values_list("id", "position"))
        states = {}
        for snapshot in Snapshot.objects.filter(session_id=session_id).order_by("id").iterator(chunk_size=BATCH):
            messages = snapshot.state["messages"]
            if "states" in messages:
                continue
            for message_id, compressed_into, excluded in messages["changed"]:
                states[message_id] = [message_id, compressed_into, excluded]
            last = messages["last_position"]
            full = sorted(
                (row for message_id, row in states.items() if positions.get(message_id, last + 1) <= last),
                key=lambda row: positions[row[0]],
            )
            state = {**snapshot.state, "messages": {"last_position": last, "states": full}}
            Snapshot.objects.filter(pk=snapshot.pk).update(state=state)


def full_to_chain(apps, schema_editor):
    Snapshot = apps.get_model("contextmgr", "Snapshot")
    for snapshot in Snapshot.objects.order_by("id").iterator(chunk_size=BATCH):
        messages = snapshot.state["messages"]
        if "states" not in messages:
            continue
        chain = {"base": None, "version": 0, "last_position": messages["last_position"], "changed": messages["states"]}
        Snapshot.objects.filter(pk=snapshot.pk).update(state={**snapshot.state, "messages": chain})


class Migration(migrations.Migration):
    dependencies = [
        ("contextmgr", "0007_storable_json_columns"),
        ("chat", "0009_storable_json_columns"),
    ]

    operations = [migrations.RunPython(chain_to_full, full_to_chain)]
