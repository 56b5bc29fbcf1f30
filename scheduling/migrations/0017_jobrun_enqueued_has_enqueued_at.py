"""A run in status ``enqueued`` has ``enqueued_at``: job_run_enqueued_has_enqueued_at.

The stale-run requeue takes the enqueued runs by ``enqueued_at < cutoff``
(job_run_enqueued_since), so an enqueued run without it would never get another task if
its first were lost. Every path that enqueues a run sets it (the claim, the take of due
runs, the re-run action; on both backends); the check makes the database say so too.

job_runs may hold millions of rows and takes an insert per order, so on PostgreSQL, in
three steps of a non-atomic migration, each committed on its own:
1. Stamp any enqueued run without ``enqueued_at`` (none is expected) with its
   ``created_at``, the instant the missed-run check already reads for one: the requeue
   can then see it. ``job_name IS NOT NULL`` makes the condition of job_run_enqueued_by_job
   implied, so the statement reads the enqueued runs only, never the table.
2. Add the check NOT VALID: a brief ACCESS EXCLUSIVE lock, no scan; every row written
   from then on is checked.
3. VALIDATE it: a scan of the table under SHARE UPDATE EXCLUSIVE, which blocks no reads or
   writes.
SQLite (development) runs 1, then rebuilds the table with the check.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddCheckConstraintNotValidOnPostgres, ValidateConstraintOnPostgres

STAMP_ENQUEUED_AT = """
UPDATE job_runs SET enqueued_at = created_at
WHERE status = 'enqueued' AND enqueued_at IS NULL AND job_name IS NOT NULL
"""


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0016_job_runs_enqueued_indexes_by_key"),
    ]

    operations = [
        migrations.RunSQL(STAMP_ENQUEUED_AT, reverse_sql=migrations.RunSQL.noop),
        AddCheckConstraintNotValidOnPostgres(
            model_name="jobrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "enqueued"), _negated=True), ("enqueued_at__isnull", False), _connector="OR"
                ),
                name="job_run_enqueued_has_enqueued_at",
            ),
        ),
        ValidateConstraintOnPostgres(model_name="jobrun", name="job_run_enqueued_has_enqueued_at"),
    ]
