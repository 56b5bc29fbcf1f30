"""SQLite's versions of the engine's statements (``scheduling.queries``), under the same
names: SQLite has no arrays, so a list travels as one JSON array read with ``json_each``,
and no data-modifying CTE, so a claim's events are written after it, through the ORM
(``scheduling.sql_sqlite``). ``tiffin.db.queries_for_backend`` picks this module on SQLite; only
``scheduling.sql`` and ``scheduling.sql_sqlite`` read it.
"""

# The claim on SQLite, which has no arrays: the rows as one JSON array of objects, one
# key per column, each read with ->> (``WHERE true`` tells SQLite's parser the ON CONFLICT
# is the INSERT's). Otherwise as queries.CLAIM_RUNS, without the events, which the ORM writes after it.
CLAIM_RUNS = """
INSERT INTO job_runs (job_name, subject, scheduled_for, due_at, status, trigger, created_at,
                      enqueued_at, finished_at, skip_reason, attempts, worker, error, overlap)
SELECT value ->> 'job_name', value ->> 'subject', value ->> 'scheduled_for', value ->> 'due_at',
       value ->> 'status', value ->> 'trigger', value ->> 'created_at', value ->> 'enqueued_at',
       value ->> 'finished_at', value ->> 'skip_reason', value ->> 'attempts', value ->> 'worker',
       value ->> 'error', value ->> 'overlap'
FROM json_each(%(rows)s)
WHERE true
ON CONFLICT (job_name, subject, scheduled_for) DO NOTHING
RETURNING id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
          enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
"""

# A new fencing token on SQLite, which has no standby: a one-row counter under the single
# writer (epoch 0). An upsert, so a flushed table (manage.py flush, a test) starts again.
NEXT_FENCE = """
INSERT INTO job_fence_counter (id, value) VALUES (1, 1)
ON CONFLICT (id) DO UPDATE SET value = job_fence_counter.value + 1
RETURNING value
"""

# queries.FIND_PASS_WORK on SQLite, which has no arrays: the job names as JSON arrays.
# ``+job_name`` keeps the column out of every index (SQLite's array_position, see
# sql_sqlite.DUE_RUN_IDS), so the due runs are read through job_run_due and the stale ones
# through job_run_enqueued_since.
FIND_PASS_WORK = """
SELECT 'due', '', (
    SELECT due_at FROM job_runs
    WHERE status IN ('scheduled', 'failed', 'abandoned') AND due_at IS NOT NULL
      AND +job_name IN (SELECT value FROM json_each(%(active)s))
    ORDER BY due_at LIMIT 1
)
UNION ALL
SELECT 'running', job_name, MIN(started_at) FROM job_runs
WHERE status = 'running' AND started_at < %(started_before)s
GROUP BY job_name
UNION ALL
SELECT 'stale', '', NULL WHERE EXISTS (
    SELECT 1 FROM job_runs
    WHERE status = 'enqueued' AND enqueued_at < %(enqueued_before)s
      AND +job_name IN (SELECT value FROM json_each(%(declared)s))
)
"""

# queries.STALE_RUNS on SQLite: the job names as a JSON array, ``+job_name`` as in
# FIND_PASS_WORK (job_run_enqueued_since is then the only index left to it), and no row
# locks (IMMEDIATE transactions hold the single write lock).
STALE_RUNS = """
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM job_runs
WHERE status = 'enqueued' AND enqueued_at < %(enqueued_before)s
  AND +job_name IN (SELECT value FROM json_each(%(declared)s))
ORDER BY enqueued_at
LIMIT %(limit)s
"""

# queries.FIRST_DUE_AT on SQLite: the job names as a JSON array.
FIRST_DUE_AT = """
SELECT due_at FROM job_runs
WHERE status IN ('scheduled', 'failed', 'abandoned') AND due_at IS NOT NULL
  AND +job_name IN (SELECT value FROM json_each(%(active)s))
ORDER BY due_at LIMIT 1
"""

# queries.JOB_OF_RUNS on SQLite: the ids as a JSON array.
JOB_OF_RUNS = """
SELECT job_name FROM job_runs WHERE id IN (SELECT value FROM json_each(%(run_ids)s)) LIMIT 1
"""
