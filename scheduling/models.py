"""The engine's tables: schedules (one row per declared job), job_runs (one row per
logical run, the claim), the events of each run, and the fencing tokens of resources."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q


class JobKind(models.TextChoices):
    CRON = "cron", "Cron"
    DELAYED = "delayed", "Delayed"


class Overlap(models.TextChoices):
    ALLOW = "allow", "Allow"
    FORBID = "forbid", "Forbid (skip the new run)"
    QUEUE = "queue", "Queue (start when the running one ends)"
    REPLACE = "replace", "Replace (supersede the running one)"


class Misfire(models.TextChoices):
    CATCH_UP = "catch_up", "Catch up every missed tick"
    COALESCE = "coalesce", "Coalesce into the latest tick"
    DEADLINE = "deadline", "Skip ticks later than a deadline"


class RunStatus(models.TextChoices):
    SCHEDULED = "scheduled", "Scheduled"
    ENQUEUED = "enqueued", "Enqueued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed (will retry)"
    DEAD = "dead", "Dead"
    SKIPPED = "skipped", "Skipped"
    ABANDONED = "abandoned", "Abandoned"
    SUPERSEDED = "superseded", "Superseded"


# The groups of statuses the engine's queries and partial indexes name; each is spelled
# here once.
# Waiting for a retry: due_at is the time of the next attempt.
RETRY_STATUSES = (RunStatus.FAILED, RunStatus.ABANDONED)
# Waiting for due_at, then for the scheduler to enqueue it (index job_run_due).
DUE_STATUSES = (RunStatus.SCHEDULED, *RETRY_STATUSES)
# With a worker, or handed to the queue for one (indexes job_run_enqueued_by_job and _since, job_run_running).
LIVE_STATUSES = (RunStatus.ENQUEUED, RunStatus.RUNNING)
# Not finished: the run will still act (both indexes above).
IN_FLIGHT_STATUSES = (*LIVE_STATUSES, *DUE_STATUSES)
# The enqueued runs as the conditions of their two indexes say them (job_run_enqueued_by_job,
# job_run_enqueued_since: each names its key, see JobRun.Meta). A read filters by one of
# them word for word, as well as by its key, so that each database's planner sees the
# index's condition implied without relying on its own inference rules.
ENQUEUED_OF_A_JOB = Q(job_name__isnull=False, status=RunStatus.ENQUEUED)
ENQUEUED_SINCE = Q(enqueued_at__isnull=False, status=RunStatus.ENQUEUED)
# Never left on its own (index job_run_finished).
FINAL_STATUSES = (RunStatus.SUCCEEDED, RunStatus.SKIPPED, RunStatus.SUPERSEDED, RunStatus.DEAD)
# A few among millions of runs (index job_run_status_rare): the failures and the skips.
RARE_STATUSES = (*RETRY_STATUSES, RunStatus.DEAD, RunStatus.SKIPPED, RunStatus.SUPERSEDED)
# The outcomes a finished attempt can have, a run's last (index job_run_job_finished, /metrics).
FINISHED_STATUSES = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.ABANDONED,
    RunStatus.DEAD,
    RunStatus.SKIPPED,
    RunStatus.SUPERSEDED,
)


class Trigger(models.TextChoices):
    CRON = "cron", "Cron tick"
    DELAYED = "delayed", "Delayed run"
    MANUAL = "manual", "Manual"
    BACKFILL = "backfill", "Backfill"


class SkipReason(models.TextChoices):
    OVERLAP = "overlap", "Another run was still running"
    MISSED_DEADLINE = "missed_deadline", "Later than the misfire deadline"
    COALESCED = "coalesced", "Coalesced into a later tick"
    PAUSED = "paused", "The job was paused"
    # Retired by end_simulation: the simulated servers that would have run it are gone.
    SIMULATION_ENDED = "simulation_ended", "The simulation ended before it ran"


class Schedule(models.Model):
    """The stored side of a declared job: what every server registered, plus the
    operator's state (paused). Registration is an idempotent upsert on ``job_name``."""

    job_name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=JobKind.choices)
    cron = models.CharField(max_length=200, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    overlap = models.CharField(max_length=16, choices=Overlap.choices)
    misfire = models.CharField(max_length=16, choices=Misfire.choices)
    misfire_deadline_seconds = models.PositiveIntegerField(null=True, blank=True)
    max_attempts = models.PositiveIntegerField()
    backoff_seconds = models.FloatField()
    timeout_seconds = models.PositiveIntegerField()
    heartbeat = models.BooleanField()
    batch_size = models.PositiveIntegerField()
    # No tick before this instant is ever claimed by the scheduler (no silent backfill).
    first_seen_at = models.DateTimeField()
    registered_at = models.DateTimeField()
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, blank=True)

    class Meta:
        db_table = "job_schedules"
        ordering = ["job_name"]
        permissions = [
            ("pause_schedule", "Can pause and resume schedules"),
            ("run_schedule", "Can run a job now or backfill it"),
        ]

    def __str__(self) -> str:
        return self.job_name


class JobRun(models.Model):
    """One logical run: the claim. Unique on (job_name, subject, scheduled_for), so a
    tick claimed by one server is invisible to the others' INSERT ... ON CONFLICT."""

    job_name = models.CharField(max_length=100)
    # Empty for cron ticks; names the entity for delayed runs ("order:123").
    subject = models.CharField(max_length=200, blank=True, default="")
    # The logical time: business computations use it instead of now().
    scheduled_for = models.DateTimeField()
    # When the run (or its next attempt) may be enqueued.
    due_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=RunStatus.choices)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    attempts = models.PositiveIntegerField(default=0)
    fence = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    skip_reason = models.CharField(max_length=32, choices=SkipReason.choices, blank=True)
    error = models.TextField(blank=True)
    # The handler's summary; Decimal and datetime values are stored as strings.
    result = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    # The overlap policy this run follows instead of its job's (a backfill's choice:
    # "queue" runs its ticks one after another); blank: the job's.
    overlap = models.CharField(max_length=16, choices=Overlap.choices, blank=True, default="", db_default="")

    class Meta:
        db_table = "job_runs"
        ordering = ["-scheduled_for", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["job_name", "subject", "scheduled_for"], name="job_run_claim_key"),
            # A run waiting for a worker says since when: the stale-run requeue reads
            # enqueued_at (job_run_enqueued_since), and a run without it would never get
            # another task. Added NOT VALID, then validated, on PostgreSQL (migration 0017).
            models.CheckConstraint(
                condition=~Q(status=RunStatus.ENQUEUED) | Q(enqueued_at__isnull=False),
                name="job_run_enqueued_has_enqueued_at",
            ),
        ]
        indexes = [
            # Scheduler: due delayed runs and due retries,
            # WHERE status IN ('scheduled','failed','abandoned') AND due_at <= now ORDER BY due_at;
            # their job test is one no index serves (scheduling.queries), so no statistics can
            # send them to job_run_by_job or the claim key, every run of the job.
            models.Index(
                fields=["due_at"],
                name="job_run_due",
                condition=Q(status__in=list(DUE_STATUSES)),
            ),
            # The runs waiting for a worker. Each of their indexes names its key in its condition
            # (``key IS NOT NULL``), so only a statement that tests that key can use it, and then
            # as a range of it: statistics taken when nothing was enqueued say these indexes are
            # empty whatever they hold, and the planner scanned one whole for any statement
            # that merely implied ``status = 'enqueued'`` (a start filtered every enqueued run
            # by id; then, with an index by id, a cron job's queue hand-off filtered them all
            # by job). A statement about one run by id has no such index left: the primary key.
            #
            # The job-wide reads: the queue hand-off and the queue policy's waiting runs,
            # WHERE job_name = ? AND status = 'enqueued' ORDER BY scheduled_for, id.
            models.Index(
                fields=["job_name", "scheduled_for", "id"],
                name="job_run_enqueued_by_job",
                condition=ENQUEUED_OF_A_JOB,
            ),
            # The stale runs (a lost task), oldest enqueued first: the pass's probe and the
            # requeue, WHERE status = 'enqueued' AND enqueued_at < cutoff ORDER BY enqueued_at;
            # their job test is one no index serves (scheduling.queries), so the range read
            # here, the stale runs, is all they read.
            models.Index(
                fields=["enqueued_at"],
                name="job_run_enqueued_since",
                condition=ENQUEUED_SINCE,
            ),
            # Overlap decisions, queue hand-off and the abandoned-run sweep: the running runs of
            # a job, WHERE job_name = ? AND status = 'running'. It holds no more runs than
            # the workers run at once, so even a plan that scans it all (a finish, a heartbeat
            # or a fence check by id under stale statistics) reads a handful of rows.
            models.Index(
                fields=["job_name", "id"],
                name="job_run_running",
                condition=Q(status=RunStatus.RUNNING),
            ),
            # Admin list filtered by one of the rare statuses, newest first, and check_runs'
            # skipped and dead runs of the window, WHERE status = ? AND scheduled_for > start.
            # The common ones need no entry here, which would cost every run one more index
            # write at its claim or its success (docs/benchmark-methods.md, worker_cost):
            # 'succeeded' and 'scheduled' are read through job_run_recent, newest first (the
            # scheduled runs are the newest, and the succeeded most of the rest), or counted
            # through job_run_due; the live ones through their own indexes above (not led by
            # status: a trap for "this run, if still enqueued", see above).
            models.Index(
                fields=["status", "scheduled_for"],
                name="job_run_status_rare",
                condition=Q(status__in=list(RARE_STATUSES)),
            ),
            # The admin job runs list and its day drill-down, newest first:
            # ORDER BY scheduled_for DESC, id DESC LIMIT n (optionally WHERE scheduled_for in a day),
            # and the MIN/MAX the date drill-down starts from.
            models.Index(fields=["scheduled_for", "id"], name="job_run_recent"),
            # A job's runs newest first: the admin list filtered by job and the last run of
            # each job (dashboard, schedules list, list_jobs), WHERE job_name = ? [AND status ...]
            # ORDER BY scheduled_for DESC, id DESC LIMIT n; the recent successes check_runs
            # takes a job's expected duration from.
            models.Index(fields=["job_name", "scheduled_for", "id"], name="job_run_by_job"),
            # check_runs: runs that died in the window whatever their tick's age,
            # WHERE status = 'dead' AND finished_at > window start (dead runs only: tiny).
            models.Index(fields=["finished_at"], name="job_run_dead_finished", condition=Q(status="dead")),
            # The admin list filtered by trigger = manual or backfill (rare among millions of
            # cron and delayed rows), newest first.
            models.Index(
                fields=["trigger", "scheduled_for", "id"],
                name="job_run_by_hand",
                condition=Q(trigger__in=["manual", "backfill"]),
            ),
            # /metrics (operations.metrics): a job's newest finish of one outcome (its last
            # success, its last run), WHERE job_name = ? AND status = ? ORDER BY finished_at DESC LIMIT 1.
            models.Index(
                fields=["job_name", "status", "finished_at"],
                name="job_run_job_finished",
                condition=Q(status__in=list(FINISHED_STATUSES)),
            ),
            # The history prune: finished runs oldest finished first, resuming after a key,
            # WHERE status IN (final) AND finished_at < cutoff AND (finished_at, id) > (?, ?).
            models.Index(
                fields=["finished_at", "id"],
                name="job_run_finished",
                condition=Q(status__in=list(FINAL_STATUSES)),
            ),
        ]
        permissions = [("rerun_jobrun", "Can re-run an abandoned or dead run")]

    def __str__(self) -> str:
        subject = f" {self.subject}" if self.subject else ""
        return f"{self.job_name}{subject} @ {self.scheduled_for.isoformat()}"

    def overlap_policy(self, job_overlap: str) -> Overlap:
        """The overlap policy this run follows: its own if it has one, else its job's."""
        return Overlap(self.overlap or job_overlap)

    @property
    def lateness(self) -> timedelta | None:
        """How long after its logical time the run started."""
        if self.started_at is None:
            return None
        return self.started_at - self.scheduled_for

    @property
    def late_by(self) -> timedelta | None:
        """The lateness where something set the time: a cron tick, or a delayed run's due
        instant. None for a manual or backfill run, whose logical time is whatever the
        operator chose (a backfill of last week did not start "202 hours late")."""
        if self.trigger in (Trigger.MANUAL, Trigger.BACKFILL):
            return None
        return self.lateness

    def duration(self, *, now: datetime | None = None) -> timedelta | None:
        if self.started_at is None:
            return None
        end = self.finished_at or now
        return None if end is None else end - self.started_at


class JobRunEvent(models.Model):
    """Append-only history of a run's transitions, including rejected writes."""

    run = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    kind = models.CharField(max_length=32)
    attempt = models.PositiveIntegerField(default=0)
    fence = models.BigIntegerField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        db_table = "job_run_events"
        # In the order they were written. ``at`` is the writing process's clock, and servers'
        # clocks differ: a run abandoned by a fast scheduler and restarted by a slow worker
        # would read "started -> succeeded -> abandoned" by time.
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} at {self.at.isoformat()}"


class Fence(models.Model):
    """The highest fencing token accepted so far for a resource (see fence_check)."""

    resource = models.CharField(max_length=200, primary_key=True)
    token = models.BigIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "job_fences"

    def __str__(self) -> str:
        return f"{self.resource} >= {self.token}"


class FenceCounter(models.Model):
    """SQLite's stand-in for the PostgreSQL sequence job_runs_fence_seq (one row)."""

    value = models.BigIntegerField(default=0)

    class Meta:
        db_table = "job_fence_counter"

    def __str__(self) -> str:
        return f"fence counter at {self.value}"


class FenceEpoch(models.Model):
    """An epoch of the fencing tokens (the primary's timeline) as the missed-run check
    first saw it: the memory that turns a new epoch into "the database failed over"."""

    epoch = models.BigIntegerField(primary_key=True)
    first_seen_at = models.DateTimeField()

    class Meta:
        db_table = "job_fence_epochs"
        ordering = ["epoch"]

    def __str__(self) -> str:
        return f"epoch {self.epoch} since {self.first_seen_at.isoformat()}"


class SchedulerNode(models.Model):
    """One row per scheduler loop (host:pid), stamped every pass: /healthz reads the
    age of the newest pass to tell whether any scheduler is alive."""

    name = models.CharField(max_length=200, primary_key=True)
    started_at = models.DateTimeField()
    last_pass_at = models.DateTimeField()
    passes = models.BigIntegerField(default=0)

    class Meta:
        db_table = "job_scheduler_nodes"
        ordering = ["-last_pass_at"]

    def __str__(self) -> str:
        return self.name


class ProblemKind(models.TextChoices):
    """What the missed-run check can find wrong with a logical run (see operations.monitoring)."""

    NEVER_CLAIMED = "never_claimed", "Never claimed"
    NOT_STARTED = "not_started", "Claimed but never started"
    OVERRUNNING = "overrunning", "Running past its expected duration"
    STALE_HEARTBEAT = "stale_heartbeat", "Running with a stale heartbeat"
    RETRYING = "retrying", "Failed and retrying"
    DEAD = "dead", "Dead"
    SKIPPED = "skipped", "Skipped"
    # An app's own invariant over the data its job writes (payouts: the ledger).
    INVARIANT = "invariant", "Invariant broken"
    # The database failed over (the fencing tokens' epoch moved), and the runs it cut off.
    FAILOVER = "failover", "Database failed over"


class RunAlert(models.Model):
    """One problem the check has alerted on: the memory that makes every problem alert once.

    Unique on (job_name, subject, scheduled_for, kind): a run that goes from retrying to
    dead alerts twice (two kinds), an hourly check seeing the same dead run alerts once.
    ``resolved_at`` is set by the first check that no longer sees the problem.
    """

    job_name = models.CharField(max_length=100)
    subject = models.CharField(max_length=200, blank=True, default="")
    scheduled_for = models.DateTimeField()
    kind = models.CharField(max_length=32, choices=ProblemKind.choices)
    run_id = models.BigIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)
    alerted_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "job_run_alerts"
        ordering = ["-alerted_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["job_name", "subject", "scheduled_for", "kind"], name="job_run_alert_once"),
        ]
        indexes = [
            # /healthz and each check pass: the open alerts,
            # WHERE resolved_at IS NULL.
            models.Index(fields=["alerted_at"], name="job_run_alert_open", condition=Q(resolved_at__isnull=True)),
            # The history prune: alerts resolved before a cutoff, WHERE resolved_at < ?.
            models.Index(fields=["resolved_at"], name="job_run_alert_resolved", condition=Q(resolved_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.job_name} @ {self.scheduled_for.isoformat()}"
