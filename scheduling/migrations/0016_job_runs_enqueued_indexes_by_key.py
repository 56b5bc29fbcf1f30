"""The indexes of the enqueued runs name their key in their condition, and the stale runs get one.

job_run_enqueued_by_id (id) and job_run_enqueued_by_job (job_name, scheduled_for, id) were
both WHERE status = 'enqueued'. Statistics taken when nothing was enqueued say such an index
is empty whatever it holds, so the planner scanned one whole for any statement that implied
its condition: a cron job's queue hand-off (job_name = ? AND status = 'enqueued') read every
enqueued run of every job through job_run_enqueued_by_id, and the pass's stale check and
the requeue, which no index served by enqueued_at, read all of them too.

Now each index's condition also says its key IS NOT NULL, which only a statement testing
that key implies, so any plan that uses it is a range of that key: job_run_enqueued_by_job
for the job-wide reads, job_run_enqueued_since (enqueued_at) for the stale runs. A statement
about one run by id implies neither and probes the primary key, so job_run_enqueued_by_id
(the decoy that kept starts off job_run_enqueued_by_job) goes: as many indexes as before.

Built before the old ones are dropped, CONCURRENTLY on PostgreSQL (job_runs takes an insert
per order); the new job index is built under a temporary name and renamed.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres, RemoveIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0015_fence_epochs"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("enqueued_at__isnull", False), ("status", "enqueued")),
                fields=["enqueued_at"],
                name="job_run_enqueued_since",
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("job_name__isnull", False), ("status", "enqueued")),
                fields=["job_name", "scheduled_for", "id"],
                name="job_run_enqueued_by_job_keyed",
            ),
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="jobrun", name="job_run_enqueued_by_job"),
        migrations.RenameIndex(
            model_name="jobrun", new_name="job_run_enqueued_by_job", old_name="job_run_enqueued_by_job_keyed"
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="jobrun", name="job_run_enqueued_by_id"),
    ]
