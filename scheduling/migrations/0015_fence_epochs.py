"""job_fence_epochs: the fencing epochs the missed-run check has seen, so a new one (a
failover) is reported once; and the problem kind ``failover``."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0014_job_runs_in_flight_indexes_by_id"),
    ]

    operations = [
        migrations.CreateModel(
            name="FenceEpoch",
            fields=[
                ("epoch", models.BigIntegerField(primary_key=True, serialize=False)),
                ("first_seen_at", models.DateTimeField()),
            ],
            options={
                "db_table": "job_fence_epochs",
                "ordering": ["epoch"],
            },
        ),
        migrations.AlterField(
            model_name="runalert",
            name="kind",
            field=models.CharField(
                choices=[
                    ("never_claimed", "Never claimed"),
                    ("not_started", "Claimed but never started"),
                    ("overrunning", "Running past its expected duration"),
                    ("stale_heartbeat", "Running with a stale heartbeat"),
                    ("retrying", "Failed and retrying"),
                    ("dead", "Dead"),
                    ("skipped", "Skipped"),
                    ("invariant", "Invariant broken"),
                    ("failover", "Database failed over"),
                ],
                max_length=32,
            ),
        ),
    ]
