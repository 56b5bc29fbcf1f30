"""The status index holds the rare statuses only: job_run_status_rare replaces job_run_status_settled.

job_run_status_settled (status, scheduled_for) held every run but the live ones, so each
delayed run wrote an entry at its claim ('scheduled') and another at its success: two of
the index writes of a run's non-HOT insert and updates. The reads it served for those two
statuses are served without it: the admin list of succeeded or scheduled runs, newest
first, by job_run_recent (as the planner already chose for 'succeeded' on two million
runs); its count of scheduled runs by job_run_due. The failures and the skips, a few among
millions (the admin's status and skip-reason filters, check_runs' dead and skipped runs),
keep their index.

Built before the old one is dropped, CONCURRENTLY on PostgreSQL (job_runs takes an insert
per order).
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres, RemoveIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0017_jobrun_enqueued_has_enqueued_at"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("status__in", ["failed", "abandoned", "dead", "skipped", "superseded"])),
                fields=["status", "scheduled_for"],
                name="job_run_status_rare",
            ),
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="jobrun", name="job_run_status_settled"),
    ]
