"""The index /metrics reads each job's last success and last run from.

Built CONCURRENTLY on PostgreSQL (tiffin.migration_operations), like 0008: job_runs may
hold millions of rows when this is applied.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0009_jobrun_overlap"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(
                    ("status__in", ["succeeded", "failed", "abandoned", "dead", "skipped", "superseded"])
                ),
                fields=["job_name", "status", "finished_at"],
                name="job_run_job_finished",
            ),
        ),
    ]
