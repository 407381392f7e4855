from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0009_storable_json_columns"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="source_session_id",
            field=models.CharField(
                blank=True,
                help_text="The sessionId of the OLLM session file it was imported from (its export writes it "
                "back); empty: started here, exported under its own id.",
                max_length=200,
            ),
        ),
        migrations.AddField(
            model_name="session",
            name="source_provider",
            field=models.CharField(
                blank=True,
                help_text="The provider the imported file named (its export writes it back); empty: the "
                "backend's own.",
                max_length=200,
            ),
        ),
        migrations.AddConstraint(
            model_name="session",
            constraint=models.UniqueConstraint(
                condition=models.Q(("source_session_id", ""), _negated=True),
                fields=("owner", "source_session_id"),
                name="session_source_unique",
            ),
        ),
    ]
