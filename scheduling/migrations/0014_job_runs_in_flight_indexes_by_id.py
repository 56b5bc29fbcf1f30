"""The indexes of the runs in flight, so that a statement about one run is a probe.

job_run_live was (job_name, status) WHERE status IN ('enqueued', 'running'), and
job_run_status (status, scheduled_for) held every run. A statement about one run "if still
enqueued" (the start, its overlap read, the skip) implies the first's condition and names
the second's leading column, so the planner may scan either, and does whenever its
statistics say few runs are enqueued, as they do when they were taken while nothing was in
flight; under a backlog each start then read every enqueued run, filtering by id.
Now: the enqueued runs are indexed by id (any plan that uses it is a probe) and, for the
job-wide reads (queue hand-off), by job and logical time; the running
runs by (job_name, id) (no more of them than the workers run at once), and the status
index leaves the runs in flight out.

The new indexes are built before the old ones are dropped, all CONCURRENTLY on PostgreSQL
(tiffin.migration_operations): job_runs takes an insert per order.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres, RemoveIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0013_jobrun_skip_reason_simulation_ended"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("status", "enqueued")), fields=["id"], name="job_run_enqueued_by_id"
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("status", "enqueued")),
                fields=["job_name", "scheduled_for", "id"],
                name="job_run_enqueued_by_job",
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("status", "running")), fields=["job_name", "id"], name="job_run_running"
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("status__in", ["enqueued", "running"]), _negated=True),
                fields=["status", "scheduled_for"],
                name="job_run_status_settled",
            ),
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="jobrun", name="job_run_live"),
        RemoveIndexConcurrentlyOnPostgres(model_name="jobrun", name="job_run_status"),
    ]
