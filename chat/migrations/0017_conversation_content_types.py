"""Issue 33: the content types of the models chat 0016 took over from contextmgr follow them, so
their admin permissions, and the admin's log entries, stay theirs.

A database migrated before has them under app_label "contextmgr"; a fresh one has none yet (post_migrate
creates them after migrate). Where the other app's row already exists, the row is left as it is (two rows
for one model: `manage.py remove_stale_contenttypes` removes the stale one).
"""

from django.db import migrations

MOVED = ["checkpoint", "checkpointrevision", "goal", "goalcheckpoint", "decision", "artifact", "snapshot", "contextevent"]


def relabel(old, new):
    def run(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        db = schema_editor.connection.alias
        taken = set(ContentType.objects.using(db).filter(app_label=new, model__in=MOVED).values_list("model", flat=True))
        ContentType.objects.using(db).filter(app_label=old, model__in=MOVED).exclude(model__in=taken).update(app_label=new)
        # As Django's own RenameContentType does: the cache keys rows by app_label.
        ContentType.objects.clear_cache()

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0016_conversation_models_from_contextmgr'),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.RunPython(relabel("contextmgr", "chat"), relabel("chat", "contextmgr")),
    ]
