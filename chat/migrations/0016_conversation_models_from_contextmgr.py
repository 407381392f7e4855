"""Issue 33: the conversation domain's models move from contextmgr to chat, their tables kept.

State only: the tables (contextmgr_checkpoint, ...), their indexes and constraints stay as they are,
so no database operation runs; contextmgr 0010 deletes the models from contextmgr's state and
0017 moves their content types.
"""

import engine.core.aging
import engine.core.text
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0015_client_tasks'),
        ('contextmgr', '0009_prompt_truncated_event'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='Checkpoint',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('number', models.PositiveIntegerField(help_text='The compression that created it (1 = first).')),
                        ('level', models.PositiveSmallIntegerField(choices=[(0, 'ultra'), (1, '1 (ancient)'), (2, '2 (old)'), (3, '3 (recent)')], default=engine.core.aging.Level['RECENT'])),
                        ('first_position', models.PositiveIntegerField(blank=True, help_text="Position of the oldest message it stands for; empty when it holds none of its session's.", null=True)),
                        ('last_position', models.PositiveIntegerField(blank=True, help_text='Position of the newest message it stands for; empty with the first.', null=True)),
                        ('origin', models.CharField(blank=True, help_text='What it stands for besides its session\'s messages, for example "Carried over from “Plans”".', max_length=250)),
                        ('summary', models.TextField()),
                        ('strategy', models.CharField(choices=[('summarize', 'Summarize'), ('truncate', 'Truncate')], default='summarize', max_length=16)),
                        ('original_tokens', models.PositiveIntegerField()),
                        ('current_tokens', models.PositiveIntegerField()),
                        ('compression_count', models.PositiveIntegerField(default=1, help_text='How many times it was compressed.')),
                        ('key_decisions', models.JSONField(blank=True, default=list, encoder=engine.core.text.StorableJSONEncoder)),
                        ('files_modified', models.JSONField(blank=True, default=list, encoder=engine.core.text.StorableJSONEncoder)),
                        ('next_steps', models.JSONField(blank=True, default=list, encoder=engine.core.text.StorableJSONEncoder)),
                        ('retention', models.FloatField(blank=True, help_text='Measured share of key facts kept; null if unmeasured.', null=True)),
                        ('facts', models.JSONField(blank=True, default=list, encoder=engine.core.text.StorableJSONEncoder, help_text='The key facts of the messages it stands for, as [kind, text] pairs; retention is measured on them.')),
                        ('ledger', models.JSONField(blank=True, default=list, encoder=engine.core.text.StorableJSONEncoder, help_text='The facts kept verbatim in the prompt beside the summary, as [kind, text] pairs.')),
                        ('retired', models.BooleanField(default=False, help_text='Created after the snapshot that was restored; out of the active context.')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('compressed_at', models.DateTimeField(blank=True, help_text='When it was last aged.', null=True)),
                        ('merged_into', models.ForeignKey(blank=True, help_text='Set when it was merged into the ultra checkpoint; it then leaves the active context.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='merged_from', to='chat.checkpoint')),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='chat.session')),
                    ],
                    options={
                        'db_table': 'contextmgr_checkpoint',
                        'ordering': ['session', 'number'],
                    },
                ),
                migrations.AlterField(
                    model_name='message',
                    name='compressed_into',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='messages', to='chat.checkpoint'),
                ),
                migrations.CreateModel(
                    name='CheckpointRevision',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('level', models.PositiveSmallIntegerField(choices=[(0, 'ultra'), (1, '1 (ancient)'), (2, '2 (old)'), (3, '3 (recent)')])),
                        ('tokens', models.PositiveIntegerField()),
                        ('summary', models.TextField()),
                        ('reason', models.CharField(choices=[('created', 'Created'), ('aged', 'Aged'), ('merged', 'Merged'), ('restored', 'Restored')], max_length=16)),
                        ('retention', models.FloatField(blank=True, null=True)),
                        ('facts_total', models.PositiveIntegerField(default=0)),
                        ('facts_kept', models.PositiveIntegerField(default=0)),
                        ('missing_facts', models.JSONField(blank=True, default=list, encoder=engine.core.text.StorableJSONEncoder, help_text='The facts the next prompt lost with this version, [kind, text].')),
                        ('ledger_dropped', models.JSONField(blank=True, default=list, encoder=engine.core.text.StorableJSONEncoder, help_text='Facts the ledger had no room for at this version, [kind, text]; the full history keeps them.')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('checkpoint', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='revisions', to='chat.checkpoint')),
                    ],
                    options={
                        'db_table': 'contextmgr_checkpointrevision',
                        'ordering': ['checkpoint', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='ContextEvent',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('type', models.CharField(choices=[('compressed', 'Compressed'), ('compression-skipped', 'Compression Skipped'), ('compression-error', 'Compression Error'), ('rollover-complete', 'Rollover Complete'), ('checkpoint-created', 'Checkpoint Created'), ('checkpoint-aged', 'Checkpoint Aged'), ('snapshot-created', 'Snapshot Created'), ('snapshot-restored', 'Snapshot Restored'), ('snapshot-error', 'Snapshot Error'), ('auto-snapshot-created', 'Auto Snapshot Created'), ('prompt-truncated', 'Prompt Truncated')], max_length=32)),
                        ('payload', models.JSONField(blank=True, default=dict, encoder=engine.core.text.StorableJSONEncoder)),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='events', to='chat.session')),
                    ],
                    options={
                        'db_table': 'contextmgr_contextevent',
                        'ordering': ['session', 'created_at', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='Goal',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('description', models.TextField(max_length=2000)),
                        ('priority', models.CharField(choices=[('high', 'High'), ('medium', 'Medium'), ('low', 'Low')], default='medium', max_length=8)),
                        ('status', models.CharField(choices=[('active', 'Active'), ('paused', 'Paused'), ('completed', 'Completed')], default='active', max_length=12)),
                        ('next_step', models.TextField(blank=True, max_length=2000)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('completed_at', models.DateTimeField(blank=True, null=True)),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='goals', to='chat.session')),
                    ],
                    options={
                        'db_table': 'contextmgr_goal',
                        'ordering': ['session', 'created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='Decision',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('description', models.TextField(max_length=2000)),
                        ('locked', models.BooleanField(default=False, help_text='Locked decisions are never compressed or edited by markers.')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='decisions', to='chat.session')),
                        ('goal', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='decisions', to='chat.goal')),
                    ],
                    options={
                        'db_table': 'contextmgr_decision',
                        'ordering': ['session', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='Artifact',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('path', models.CharField(max_length=1000)),
                        ('action', models.CharField(choices=[('created', 'Created'), ('modified', 'Modified')], max_length=12)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='artifacts', to='chat.session')),
                        ('goal', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='artifacts', to='chat.goal')),
                    ],
                    options={
                        'db_table': 'contextmgr_artifact',
                        'ordering': ['session', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='GoalCheckpoint',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('description', models.TextField(max_length=2000)),
                        ('status', models.CharField(choices=[('pending', 'Pending'), ('in-progress', 'In Progress'), ('completed', 'Completed')], default='pending', max_length=12)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('goal', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='chat.goal')),
                    ],
                    options={
                        'db_table': 'contextmgr_goalcheckpoint',
                        'ordering': ['goal', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='Snapshot',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(choices=[('auto', 'Auto'), ('manual', 'Manual')], max_length=8)),
                        ('reason', models.CharField(blank=True, max_length=200)),
                        ('state', models.JSONField(encoder=engine.core.text.StorableJSONEncoder)),
                        ('token_count', models.PositiveIntegerField()),
                        ('message_count', models.PositiveIntegerField()),
                        ('checkpoint_count', models.PositiveIntegerField()),
                        ('model', models.CharField(max_length=200)),
                        ('tier', models.PositiveSmallIntegerField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='snapshots', to='chat.session')),
                    ],
                    options={
                        'db_table': 'contextmgr_snapshot',
                        'ordering': ['session', '-created_at', '-id'],
                    },
                ),
                migrations.AddIndex(
                    model_name='checkpoint',
                    index=models.Index(fields=['session', 'merged_into', 'retired', 'number'], name='checkpoint_active_idx'),
                ),
                migrations.AddIndex(
                    model_name='snapshot',
                    index=models.Index(fields=['session', 'kind', 'message_count'], name='snapshot_round_idx'),
                ),
            ],
        ),
    ]
