"""The engine's SQL statements, each one literal, whole and named, to read top to bottom.

Why a module of constants and not a ``queries.sql`` file of named blocks (procrastinate's
way): the statements stay Python names, so a reader jumps from ``sql.claim_runs`` to
``queries.CLAIM_RUNS`` and a typo in a name fails at import, not at the first call; there
is no loader to read. The text is never assembled: what you read here is what PostgreSQL
receives, the same text on every call, so each statement is prepared once per connection
(server-side binding, ``tiffin.env``).

Parameters are named (``%(now)s``), except in ``CLAIM_RUN_WITH_SUBJECT``, whose first
parameters belong to the caller's INSERT. Statuses are literals, never parameters, where a
partial index's WHERE names them: a parameter cannot prove the index's predicate, so the
generic plan of a prepared statement would scan job_runs instead (job_run_due holds
``('scheduled', 'failed', 'abandoned')``). ``tests/unit/test_queries.py`` checks every
column list and status list here against the models.

The reads of due runs (the take, the earliest due, the pass's probe) test the job with
``array_position(%(job_names)s::text[], job_name) IS NOT NULL``: the rows of ``job_name =
ANY(...)``, but no index serves it, so ``job_run_due``, read in due order, is the only index
left to them whatever the statistics say (unanalysed, the planner otherwise read every run
of the job through ``job_run_by_job``). The take's UPDATE probes by ``id = ANY(ARRAY(...))``.
The reads of stale runs (the pass's probe, the requeue's pick) test the job the same way, so
``job_run_enqueued_since``, read from its oldest entry, is the only index left to them: with
``job_name = ANY(...)`` the job index of the enqueued runs, every run waiting for a worker,
would serve them too (``scheduling.models``: each in-flight index's condition names its key).
``tests/integration/test_job_run_plans.py`` reads these plans.

PostgreSQL runs these. SQLite, which has no arrays and no data-modifying CTE, runs some as
written (``FENCE_ADVANCE``, ``SCHEDULE_STATES``), its own versions of others under the same
names (``scheduling.queries_sqlite``), and the ORM for the rest (``scheduling.sql_sqlite``).
"""

# The claim: insert the runs (one array per column, element i of each is row i), skip every
# row whose claim key (job_name, subject, scheduled_for) is taken, served by the unique
# index job_run_claim_key, and write a ``claimed`` (or ``skipped``) event for each run won,
# in the same statement. Returns the runs won, every column, as the model orders them.
CLAIM_RUNS = """
WITH claimed AS (
    INSERT INTO job_runs (job_name, subject, scheduled_for, due_at, status, trigger, created_at,
                          enqueued_at, finished_at, skip_reason, attempts, worker, error, overlap)
    SELECT * FROM unnest(
        %(job_name)s::text[], %(subject)s::text[], %(scheduled_for)s::timestamptz[],
        %(due_at)s::timestamptz[], %(status)s::text[], %(trigger)s::text[],
        %(created_at)s::timestamptz[], %(enqueued_at)s::timestamptz[], %(finished_at)s::timestamptz[],
        %(skip_reason)s::text[], %(attempts)s::integer[], %(worker)s::text[], %(error)s::text[],
        %(overlap)s::text[]
    )
    ON CONFLICT (job_name, subject, scheduled_for) DO NOTHING
    RETURNING id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
              enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
),
recorded AS (
    INSERT INTO job_run_events (run_id, at, kind, attempt, fence, worker, message)
    SELECT id, created_at, CASE WHEN status = 'skipped' THEN 'skipped' ELSE 'claimed' END,
           attempts, fence, worker, ''
    FROM claimed
)
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM claimed
"""

# A new subject's row and the claim of its delayed run, in one statement (so its own
# transaction): ``{subject_insert}`` is the caller's ``INSERT ... RETURNING id, ...`` with
# its own ``%s`` parameters, then the claim's values, one each, in the column order below;
# the run's subject is its prefix parameter followed by the new row's id. Writes the
# claim's event as CLAIM_RUNS does. Returns the subject's columns and the run's id (NULL
# when the claim key was taken, which a new id cannot be).
CLAIM_RUN_WITH_SUBJECT = """
WITH subject AS (
    {subject_insert}
),
claimed AS (
    INSERT INTO job_runs (job_name, subject, scheduled_for, due_at, status, trigger, created_at,
                          enqueued_at, finished_at, skip_reason, attempts, worker, error, overlap)
    VALUES (%s, %s::text || (SELECT id FROM subject), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (job_name, subject, scheduled_for) DO NOTHING
    RETURNING id, status, attempts, fence, worker, created_at
),
recorded AS (
    INSERT INTO job_run_events (run_id, at, kind, attempt, fence, worker, message)
    SELECT id, created_at, CASE WHEN status = 'skipped' THEN 'skipped' ELSE 'claimed' END,
           attempts, fence, worker, ''
    FROM claimed
)
SELECT subject.*, claimed.id FROM subject LEFT JOIN claimed ON true
"""

# Take up to ``limit`` due runs (delayed runs and retries) of ``job_names``, earliest due
# first, skipping rows another scheduler holds (FOR UPDATE SKIP LOCKED; the partial index
# job_run_due serves the WHERE and the ORDER BY, the only index the WHERE leaves: see the
# module's doc for the job test), move them to enqueued and write their ``enqueued``
# events. Returns them, every column, earliest due first.
ENQUEUE_DUE_RUNS = """
WITH due AS (
    SELECT id FROM job_runs
    WHERE status IN ('scheduled', 'failed', 'abandoned')
      AND due_at <= %(now)s
      AND array_position(%(job_names)s::text[], job_name) IS NOT NULL
    ORDER BY due_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
enqueued AS (
    UPDATE job_runs SET status = 'enqueued', enqueued_at = %(now)s
    WHERE id = ANY(ARRAY(SELECT id FROM due))
    RETURNING id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
              enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
),
recorded AS (
    INSERT INTO job_run_events (run_id, at, kind, attempt, fence, worker, message)
    SELECT id, %(now)s, 'enqueued', attempts, fence, worker, '' FROM enqueued
)
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM enqueued
ORDER BY due_at, id
"""

# The job of ``run_ids`` (runs of one job, as a task carries them): one row read by the
# primary key; no row when none of them exists.
JOB_OF_RUNS = """
SELECT job_name FROM job_runs WHERE id = ANY(%(run_ids)s::bigint[]) LIMIT 1
"""

# The start: those of ``run_ids`` still enqueued become running under ``fence``, one more
# attempt each (so of two workers starting the same runs, each row goes to one), with
# their ``started`` events. Returns the runs started, every column, in id order.
START_RUNS = """
WITH started AS (
    UPDATE job_runs
    SET status = 'running', fence = %(fence)s, attempts = attempts + 1, started_at = %(now)s,
        heartbeat_at = %(now)s, finished_at = NULL, worker = %(worker)s
    WHERE id = ANY(%(run_ids)s::bigint[]) AND status = 'enqueued'
    RETURNING id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
              enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
),
recorded AS (
    INSERT INTO job_run_events (run_id, at, kind, attempt, fence, worker, message)
    SELECT id, %(now)s, 'started', attempts, fence, worker, '' FROM started
)
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM started
ORDER BY id
"""

# The success: each run of the (id, fence) pairs still running under that fence is
# succeeded with ``result``. Returns the ids it changed (the others were no longer their
# worker's).
SUCCEED_RUNS = """
UPDATE job_runs AS j
SET status = 'succeeded', finished_at = %(now)s, result = %(result)s, error = ''
FROM unnest(%(run_ids)s::bigint[], %(fences)s::bigint[]) AS owned (id, fence)
WHERE j.id = owned.id AND j.fence = owned.fence AND j.status = 'running'
RETURNING j.id
"""

# One event per run of a transition (started, succeeded, ...), the runs given as arrays.
RECORD_EVENTS = """
INSERT INTO job_run_events (run_id, at, kind, attempt, fence, worker, message)
SELECT run_id, %(at)s, %(kind)s, attempt, fence, worker, %(message)s
FROM unnest(%(run_ids)s::bigint[], %(attempts)s::integer[], %(fences)s::bigint[], %(workers)s::text[])
    AS e (run_id, attempt, fence, worker)
"""

# A new fencing token: the primary's current WAL timeline (the epoch: the first 8 hex
# digits of the current WAL file's name) times 2**40, plus nextval of job_runs_fence_seq
# (its MAXVALUE is 2**40 - 1: past it nextval raises, never carries into the epoch). A
# promotion always starts a new timeline, so every token of a new primary exceeds every
# token of the old one, even those whose WAL never reached it (docs/failover.md). No
# catalog write, no lock: safe behind a transaction-mode pooler. A product, not <<, so an
# overflow raises instead of wrapping.
NEXT_FENCE = """
SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint * 1099511627776
       + nextval('job_runs_fence_seq')
"""

# The epoch new tokens carry (as in NEXT_FENCE) and the counter's last value (0 before the
# first nextval), read without taking a token.
FENCE_STATE = """
SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint,
       CASE WHEN is_called THEN last_value ELSE 0 END
FROM job_runs_fence_seq
"""

# Record ``token`` for ``resource`` if it is at least the highest seen; returns a row only
# if accepted. The upsert takes the row lock, so writers of one resource serialise until
# their transactions end (primary key). SQLite runs it as written.
FENCE_ADVANCE = """
INSERT INTO job_fences (resource, token, updated_at) VALUES (%(resource)s, %(token)s, %(now)s)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
WHERE job_fences.token <= excluded.token
RETURNING token
"""

# Whether the run is still running under ``fence``, share-locking the row until the
# transaction ends, so the abandon sweep's conditional update waits for the caller's write.
HOLD_RUN_IF_CURRENT = """
SELECT 1 FROM job_runs WHERE id = %(run_id)s AND status = 'running' AND fence = %(fence)s FOR SHARE
"""

# Serialise overlap decisions for one job until the transaction ends: a transaction-scoped
# advisory lock (two keys: the engine's namespace 0x7F1F and the job), safe behind a
# transaction-mode pooler.
LOCK_JOB = """
SELECT pg_advisory_xact_lock(32543, hashtext(%(job_name)s))
"""

# Every stored schedule: its declaration, the database's memory (first sighting, paused)
# and, for a cron job, its cursor, the newest cron tick claimed: per row a probe of the
# claim key index read backwards to the first cron row (ORDER BY ... DESC LIMIT 1, not
# MAX(), which PostgreSQL planned as an aggregate over all of the job's ticks). Manual and
# backfill rows do not move it, so a manual run never hides a missed tick. SQLite runs it
# as written.
SCHEDULE_STATES = """
SELECT s.job_name, s.first_seen_at, s.paused,
       s.kind, s.cron, s.timezone, s.overlap, s.misfire, s.misfire_deadline_seconds, s.max_attempts,
       s.backoff_seconds, s.timeout_seconds, s.heartbeat, s.batch_size,
       CASE WHEN s.kind = 'cron' THEN (
           SELECT r.scheduled_for FROM job_runs AS r
           WHERE r.job_name = s.job_name AND r.subject = '' AND r.trigger = 'cron'
           ORDER BY r.scheduled_for DESC
           LIMIT 1
       ) END
FROM job_schedules AS s
"""

# What a pass's run queries would find, read without locks, in one statement, so a pass with
# nothing to take (nearly every pass) opens none of their locking transactions. Rows: one
# ('due', '', the earliest due_at of an ``active`` job's waiting delayed run or retry, as
# FIRST_DUE_AT reads it, or NULL); a ('running', job, its oldest start) per job with a run
# running since before ``started_before`` (job_run_running); and ('stale', '', NULL) if a
# run of a ``declared`` job is enqueued since before ``enqueued_before``, as STALE_RUNS
# reads them (job_run_enqueued_since, read from its oldest entry to the first such run).
# The third column is a timestamp in the branches with a row (a bare NULL there would be
# text).
FIND_PASS_WORK = """
SELECT 'due', '', (
    SELECT due_at FROM job_runs
    WHERE status IN ('scheduled', 'failed', 'abandoned') AND due_at IS NOT NULL
      AND array_position(%(active)s::text[], job_name) IS NOT NULL
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
      AND array_position(%(declared)s::text[], job_name) IS NOT NULL
)
"""

# Up to ``limit`` runs of ``declared`` jobs enqueued since before ``enqueued_before`` (their
# task lost, or not yet taken: the caller checks the queue), oldest enqueued first, locked
# FOR UPDATE SKIP LOCKED, every column: the partial index job_run_enqueued_since read from
# its oldest entry, the stale runs only (see the module's doc for the job test).
STALE_RUNS = """
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM job_runs
WHERE status = 'enqueued' AND enqueued_at < %(enqueued_before)s
  AND array_position(%(declared)s::text[], job_name) IS NOT NULL
ORDER BY enqueued_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

# The earliest due_at of an ``active`` job's waiting delayed run or retry (no row: none), for
# the loop's sleep after a pass that took due runs: the partial index job_run_due (due_at),
# read forwards to the first such run.
FIRST_DUE_AT = """
SELECT due_at FROM job_runs
WHERE status IN ('scheduled', 'failed', 'abandoned') AND due_at IS NOT NULL
  AND array_position(%(active)s::text[], job_name) IS NOT NULL
ORDER BY due_at LIMIT 1
"""

# The runs in flight the missed-run check judges at ``horizon`` (operations.monitoring), each
# kind read through the partial index that holds exactly it, its condition said word for
# word (SQLite's planner matches a list of statuses only as written, never a list of
# parameters): scheduled runs due by ``horizon`` (a range of job_run_due), runs waiting for
# a retry whenever it is due (two statuses of job_run_status_rare), runs enqueued by
# ``horizon`` (a range of job_run_enqueued_since) and the running runs (job_run_running).
# A test of every status in flight at once is one no index serves (every run read), and
# job_run_due read whole is every run claimed for later. No ORDER BY: SQLite then read two
# of the four kinds through job_run_recent, every run, to merge them in order; the caller
# sorts the few. PostgreSQL and SQLite run it as written.
RUNS_IN_FLIGHT = """
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM job_runs
WHERE status IN ('scheduled', 'failed', 'abandoned') AND status = 'scheduled' AND due_at <= %(horizon)s
UNION ALL
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM job_runs
WHERE status IN ('failed', 'abandoned', 'dead', 'skipped', 'superseded') AND status IN ('failed', 'abandoned')
UNION ALL
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM job_runs
WHERE enqueued_at IS NOT NULL AND status = 'enqueued' AND enqueued_at <= %(horizon)s
UNION ALL
SELECT id, job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence, created_at,
       enqueued_at, started_at, heartbeat_at, finished_at, worker, skip_reason, error, result, overlap
FROM job_runs
WHERE status = 'running'
"""

# Per job with a schedule and per finished status (models.FINISHED_STATUSES), the newest
# finished_at (NULL: none), for /metrics (operations.metrics): a row per job and status, each
# one backward step of the partial index job_run_job_finished (job_name, status,
# finished_at). Its condition is said word for word: SQLite's planner matched the index to
# neither ``status = %s`` nor ``status = 'succeeded'`` alone (it read every run of the job
# through job_run_by_job and sorted them), and PostgreSQL's generic plan cannot prove it
# from a parameter. The status comes from the list of statuses, not a literal per subquery:
# with ``status = 'succeeded'`` PostgreSQL walked job_run_finished (every final run, newest
# first) back to the job's last success, every run of the other jobs since then read (2 s
# for a weekly job among a million runs). ``finished_at IS NOT NULL``: PostgreSQL sorts
# NULLs first in DESC. PostgreSQL and SQLite run it as written.
LAST_FINISHES = """
SELECT s.job_name, f.status,
  (SELECT finished_at FROM job_runs
   WHERE job_name = s.job_name AND status IN ('succeeded', 'failed', 'abandoned', 'dead', 'skipped', 'superseded')
     AND status = f.status AND finished_at IS NOT NULL
   ORDER BY finished_at DESC LIMIT 1)
FROM job_schedules AS s
CROSS JOIN (SELECT 'succeeded' AS status UNION ALL SELECT 'failed' UNION ALL SELECT 'abandoned'
            UNION ALL SELECT 'dead' UNION ALL SELECT 'skipped' UNION ALL SELECT 'superseded') AS f
ORDER BY s.job_name
"""

# The backlog /metrics reads at ``now`` (operations.metrics): how many runs are due and not
# started, each kind counted up to ``limit``, and the oldest due_at of each. The due delayed
# runs and retries are a range of job_run_due, its condition said word for word; the enqueued
# runs are job_run_enqueued_since's, its condition (enqueued_at IS NOT NULL) said likewise.
# The statuses are literals: a list of parameters (the ORM's status IN (%s, %s, %s)) let
# SQLite's planner match no partial index, and PostgreSQL's generic plan (server-side
# binding prepares after five runs) none either: both scanned every run. PostgreSQL and
# SQLite run it as written.
BACKLOG = """
SELECT
  (SELECT count(*) FROM (
     SELECT 1 FROM job_runs WHERE status IN ('scheduled', 'failed', 'abandoned') AND due_at <= %(now)s
     LIMIT %(limit)s
   ) AS due),
  (SELECT min(due_at) FROM job_runs WHERE status IN ('scheduled', 'failed', 'abandoned') AND due_at <= %(now)s),
  (SELECT count(*) FROM (
     SELECT 1 FROM job_runs WHERE enqueued_at IS NOT NULL AND status = 'enqueued' LIMIT %(limit)s
   ) AS enqueued),
  (SELECT min(due_at) FROM job_runs WHERE enqueued_at IS NOT NULL AND status = 'enqueued')
"""
