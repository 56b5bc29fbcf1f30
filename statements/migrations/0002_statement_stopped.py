# A statement the mail server refused for good (a 5xx) stops for a person, who may retry it
# (docs/statements.md): the status 'stopped' and the retry permission.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("statements", "0001_statement_outbox"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="statement",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [("retry_statement", "Can retry a stopped statement with the same Message-ID")],
            },
        ),
        migrations.RemoveConstraint(
            model_name="statement",
            name="statement_status_known",
        ),
        migrations.AlterField(
            model_name="statement",
            name="status",
            field=models.CharField(
                choices=[
                    ("waiting_recipient", "Waiting for the restaurant's statement email"),
                    ("pending", "Pending (to send, or the last attempt failed)"),
                    ("sent", "Sent (the mail server accepted it)"),
                    ("stopped", "Stopped (needs a person)"),
                ],
                max_length=20,
            ),
        ),
        migrations.AddConstraint(
            model_name="statement",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["waiting_recipient", "pending", "sent", "stopped"])),
                name="statement_status_known",
            ),
        ),
    ]
