"""Issue 33: the conversation domain's models now live in the chat app (chat 0016), which keeps
their tables: contextmgr's state forgets them, and no database operation runs.

Deleted in dependency order: the models that point at another first.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0016_conversation_models_from_contextmgr'),
        ('contextmgr', '0009_prompt_truncated_event'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name='CheckpointRevision'),
                migrations.DeleteModel(name='GoalCheckpoint'),
                migrations.DeleteModel(name='Decision'),
                migrations.DeleteModel(name='Artifact'),
                migrations.DeleteModel(name='Goal'),
                migrations.DeleteModel(name='Snapshot'),
                migrations.DeleteModel(name='ContextEvent'),
                migrations.DeleteModel(name='Checkpoint'),
            ],
        ),
    ]
