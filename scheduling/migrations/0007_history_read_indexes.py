"""Indexes that keep the everyday reads of job_runs bounded on a table of millions of rows.

On PostgreSQL they are built with CREATE INDEX CONCURRENTLY (tiffin.migration_operations):
job_runs takes an insert per order, and a plain CREATE INDEX on a large table would block
those inserts until it ends.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0006_problem_kind_invariant"),
    ]

    operations = [
        # The admin job runs list, unfiltered and by day, newest first:
        # ORDER BY scheduled_for DESC, id DESC LIMIT n [WHERE scheduled_for in a day],
        # and the MIN/MAX(scheduled_for) the date drill-down starts from.
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(fields=["scheduled_for", "id"], name="job_run_recent"),
        ),
        # One job's runs newest first: the admin list by job, the last run of each job
        # (dashboard, schedules list, list_jobs), check_runs' recent successes of a job.
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(fields=["job_name", "scheduled_for", "id"], name="job_run_by_job"),
        ),
        # check_runs: the runs that died in the window, whatever their tick's age,
        # WHERE status = 'dead' AND finished_at > start.
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("status", "dead")), fields=["finished_at"], name="job_run_dead_finished"
            ),
        ),
        # The admin list filtered by trigger manual or backfill (rare among the cron and
        # delayed rows), newest first.
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("trigger__in", ["manual", "backfill"])),
                fields=["trigger", "scheduled_for", "id"],
                name="job_run_by_hand",
            ),
        ),
    ]
