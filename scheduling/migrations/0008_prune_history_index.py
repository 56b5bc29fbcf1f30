"""The indexes of the history prune: finished runs oldest first, resolved alerts.

Built CONCURRENTLY on PostgreSQL (tiffin.migration_operations): job_runs may hold
millions of rows by the time this is applied, and a plain CREATE INDEX would block every
claim and order_place insert until it ends.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0007_history_read_indexes"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("status__in", ["succeeded", "skipped", "superseded", "dead"])),
                fields=["finished_at", "id"],
                name="job_run_finished",
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="runalert",
            index=models.Index(
                condition=models.Q(("resolved_at__isnull", False)),
                fields=["resolved_at"],
                name="job_run_alert_resolved",
            ),
        ),
    ]
