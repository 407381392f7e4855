from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0004_context_versions'),
    ]

    operations = [
        migrations.AddField(
            model_name='session',
            name='summary_model',
            field=models.CharField(blank=True, help_text='Model that writes checkpoints; empty: the chat model.', max_length=200),
        ),
    ]
