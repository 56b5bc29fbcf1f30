# A payout larger than one transfer can carry is held for a person (docs/transfers.md):
# the status 'held'.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("transfers", "0001_transfer_outbox"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="transfer",
            name="transfer_status_known",
        ),
        migrations.AlterField(
            model_name="transfer",
            name="status",
            field=models.CharField(
                choices=[
                    ("waiting_account", "Waiting for the restaurant's provider account"),
                    ("pending", "Pending (to send, or outcome unknown)"),
                    ("sent", "Sent (the provider holds it)"),
                    ("stopped", "Stopped (needs a person)"),
                    ("held", "Held: over what one transfer can carry (needs a person)"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="transfer",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["waiting_account", "pending", "sent", "stopped", "held"])),
                name="transfer_status_known",
            ),
        ),
    ]
