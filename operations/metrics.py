"""The figures ``/metrics`` reads from the database at scrape time: the same on every
server, whichever one Prometheus asks.

Every read is bounded, so a scrape costs the same on ten million runs as on none:

1. per declared job, the newest finish of each outcome (last success, last run and its
   outcome): one query, one descent of the partial index ``job_run_job_finished`` per
   job and outcome;
2. runs by job and status whose logical time is inside the missed-run check's window:
   a range of ``job_run_recent`` (the window's runs, not the history);
3. the backlog, runs due and not started: the due ones through ``job_run_due``, the
   enqueued ones through ``job_run_enqueued_since``; counted up to BACKLOG_COUNT_LIMIT;
4. django-q2's queued tasks (its queue table only holds tasks not yet done), counted up
   to the same limit;
5. open problems of the missed-run check by kind (``job_run_alert_open``);
6. the scheduler nodes (one row per loop, pruned after SCHEDULER_NODE_RETENTION_DAYS);
7. the fencing tokens' epoch (the primary's timeline, which a failover moves), the
   newest token (the epoch and the sequence's last value, no token taken), when the
   missed-run check first saw the epoch after an older one (``job_fence_epochs``), and the
   runs still running under an older epoch (``job_run_running``: running runs only);
8. per job, its schedule's expected interval (computed from the cron expression, cached
   per expression, zone and year) and when it was first registered (``job_schedules``);
9. the figures the apps declare over their own tables (``database_gauges``), bounded
   likewise by their own indexes.
"""

from __future__ import annotations

import functools
import hmac
import itertools
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Max, QuerySet
from django_q.models import OrmQ
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from scheduling import cron, queries, sql
from scheduling.metrics import PROCESS_REGISTRY, metrics_directory
from scheduling.models import (
    FINISHED_STATUSES,
    FenceCounter,
    FenceEpoch,
    JobRun,
    ProblemKind,
    RunAlert,
    RunStatus,
    Schedule,
    SchedulerNode,
)
from scheduling.registry import registry

# Counts of waiting work stop here: past it, the number matters less than the alert.
BACKLOG_COUNT_LIMIT = 100_000
# Ticks sampled to find a schedule's longest gap (a minutely job: about three days).
INTERVAL_SAMPLE_TICKS = 5000

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# The apps' own figures (``database_gauges``): each a read of the app's tables as of the
# scrape's instant, yielding metric families.
AppGauges = Callable[[datetime], Iterable[Metric]]
_APP_GAUGES: list[AppGauges] = []


def database_gauges(read: AppGauges) -> AppGauges:
    """Declare ``read`` as figures /metrics reads from the database at every scrape, as
    ``operations.monitoring.invariant`` declares a check: the engine imports no app, and an
    app declares its gauges here (the transfers' reconciliation, transfers/metrics.py)."""
    if read not in _APP_GAUGES:
        _APP_GAUGES.append(read)
    return read


def _seconds(moment: datetime) -> float:
    return moment.timestamp()


class DatabaseCollector(Collector):
    """A prometheus-client collector yielding the figures above as of ``now``."""

    def __init__(self, *, now: datetime) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        yield from _job_finishes()
        yield _runs_in_window(self.now)
        yield from _backlog(self.now)
        yield _queued_tasks()
        yield _open_problems()
        yield from _schedulers(self.now)
        yield from _fence()
        yield from _schedules(self.now)
        for read in _APP_GAUGES:
            yield from read(self.now)


def _job_finishes() -> Iterator[Metric]:
    success = GaugeMetricFamily(
        "tiffin_job_last_success_timestamp_seconds",
        "When the job's newest successful run finished (Unix time).",
        labels=["job_name"],
    )
    last = GaugeMetricFamily(
        "tiffin_job_last_run_timestamp_seconds",
        "When the job's newest finished attempt (any outcome) finished (Unix time).",
        labels=["job_name"],
    )
    outcome = GaugeMetricFamily(
        "tiffin_job_last_run_status",
        "1 for the outcome of the job's newest finished attempt, 0 for the others.",
        labels=["job_name", "status"],
    )
    for job_name, finishes in jobs_last_finishes().items():
        known = {status: at for status, at in finishes.items() if at is not None}
        if RunStatus.SUCCEEDED in known:
            success.add_metric([job_name], _seconds(known[RunStatus.SUCCEEDED]))
        if not known:
            continue
        newest = max(known, key=lambda status: known[status])
        last.add_metric([job_name], _seconds(known[newest]))
        for status in FINISHED_STATUSES:
            outcome.add_metric([job_name, str(status)], 1.0 if status == newest else 0.0)
    yield from (success, last, outcome)


def jobs_last_finishes() -> dict[str, dict[str, datetime | None]]:
    """Per declared and registered job, the newest ``finished_at`` of each finished status.

    One query (``sql.last_finishes``): a row per job from job_schedules, with one correlated
    subquery per status, each a single backward step of the partial index
    job_run_job_finished (job_name, status, finished_at), its condition said as the index
    says it. A query per job and status cost a scrape 36 round trips.
    """
    declared = {job.name for job in registry.all()}
    return {job_name: finishes for job_name, finishes in sql.last_finishes().items() if job_name in declared}


def _runs_in_window(now: datetime) -> Metric:
    seconds = settings.SCHEDULER_CHECK_WINDOW_SECONDS
    family = GaugeMetricFamily(
        "tiffin_runs",
        f"Runs whose logical time is in the last {seconds} s (the missed-run check's window), by job and status.",
        labels=["job_name", "status"],
    )
    window = JobRun.objects.filter(scheduled_for__gt=now - timedelta(seconds=seconds), scheduled_for__lte=now)
    counts = window.order_by().values_list("job_name", "status").annotate(count=Count("id"))
    for job_name, status, count in counts:
        family.add_metric([job_name, status], float(count))
    return family


def _backlog(now: datetime) -> Iterator[Metric]:
    """Runs due and not started: due delayed runs and retries, and enqueued runs
    (``sql.backlog``: each kind through its own partial index, its statuses said as the
    index's condition says them)."""
    waiting = sql.backlog(now=now, limit=BACKLOG_COUNT_LIMIT)
    oldest = [moment for moment in (waiting.oldest_due, waiting.oldest_enqueued) if moment is not None]
    backlog = GaugeMetricFamily(
        "tiffin_backlog_runs",
        f"Runs due and not yet started (scheduled or retrying past their due time, or enqueued); "
        f"counted up to {BACKLOG_COUNT_LIMIT} of each kind.",
        value=float(waiting.due + waiting.enqueued),
    )
    age = GaugeMetricFamily(
        "tiffin_backlog_oldest_age_seconds",
        "How long the oldest run due and not yet started has been due (0 when none is).",
        value=max([(now - moment).total_seconds() for moment in oldest] + [0.0]),
    )
    yield from (backlog, age)


def _capped_count(rows: QuerySet[Any, Any]) -> int:
    """COUNT(*) over a LIMIT: it stops at BACKLOG_COUNT_LIMIT rows."""
    return rows[:BACKLOG_COUNT_LIMIT].count()


def _queued_tasks() -> Metric:
    count = _capped_count(OrmQ.objects.order_by())
    return GaugeMetricFamily(
        "tiffin_queue_tasks", "Tasks waiting in django-q2's queue (taken or not).", value=float(count)
    )


def _open_problems() -> Metric:
    family = GaugeMetricFamily(
        "tiffin_open_problems",
        "Problems the missed-run check found and has not seen resolved, by kind.",
        labels=["kind"],
    )
    open_alerts = RunAlert.objects.filter(resolved_at__isnull=True).order_by()
    counts = dict(open_alerts.values_list("kind").annotate(count=Count("id")).values_list("kind", "count"))
    for kind in ProblemKind:
        family.add_metric([str(kind)], float(counts.get(str(kind), 0)))
    return family


def _schedulers(now: datetime) -> Iterator[Metric]:
    alive_after = now - timedelta(seconds=settings.SCHEDULER_HEALTHZ_MAX_AGE_SECONDS)
    nodes = SchedulerNode.objects.aggregate(latest=Max("last_pass_at"))
    alive = SchedulerNode.objects.filter(last_pass_at__gte=alive_after).count()
    yield GaugeMetricFamily(
        "tiffin_scheduler_nodes_alive",
        f"Scheduler loops whose last pass is at most {settings.SCHEDULER_HEALTHZ_MAX_AGE_SECONDS:g} s old.",
        value=float(alive),
    )
    if nodes["latest"] is not None:
        yield GaugeMetricFamily(
            "tiffin_scheduler_last_pass_age_seconds",
            "Seconds since the newest pass of any scheduler loop.",
            value=(now - nodes["latest"]).total_seconds(),
        )


def _fence() -> Iterator[Metric]:
    epoch, highest = fence_state()
    yield GaugeMetricFamily(
        "tiffin_fence_epoch",
        "The epoch new fencing tokens carry: the PostgreSQL primary's timeline, one more after "
        "every promotion (0 on SQLite). A change means the database failed over.",
        value=float(epoch),
    )
    yield GaugeMetricFamily(
        "tiffin_fence_token_highest",
        "The newest fencing token's value: the epoch times 2^40 plus the token counter's last value.",
        value=float(highest),
    )
    changed = FenceEpoch.objects.filter(epoch=epoch).values_list("first_seen_at", flat=True).first()
    if changed is not None and FenceEpoch.objects.filter(epoch__lt=epoch).exists():
        yield GaugeMetricFamily(
            "tiffin_fence_epoch_changed_timestamp_seconds",
            "When the missed-run check first saw the current epoch after an older one: the "
            "failover, as the check saw it (Unix time; absent before any failover).",
            value=_seconds(changed),
        )
    base = epoch << sql.FENCE_COUNTER_BITS
    stale = JobRun.objects.filter(status=RunStatus.RUNNING, fence__gte=1 << sql.FENCE_COUNTER_BITS, fence__lt=base)
    yield GaugeMetricFamily(
        "tiffin_runs_running_old_epoch",
        "Runs still running with a token of an older epoch than the current one: started on a "
        "primary that has since failed over, their writes are refused and they will be abandoned and retried.",
        value=float(stale.count()),
    )


def fence_state() -> tuple[int, int]:
    """The epoch new tokens carry and the newest token's value on it: on PostgreSQL the
    primary's timeline and ``timeline * 2**40`` plus job_runs_fence_seq's last value; on
    SQLite epoch 0 and the counter row."""
    if connection.vendor == "postgresql":  # seam: the epoch is the timeline; SQLite's is 0
        with connection.cursor() as cursor:
            cursor.execute(queries.FENCE_STATE)
            epoch, counter = cursor.fetchone()
        return int(epoch), (int(epoch) << sql.FENCE_COUNTER_BITS) + int(counter)
    value = FenceCounter.objects.values_list("value", flat=True).first()
    return 0, int(value or 0)


def _schedules(now: datetime) -> Iterator[Metric]:
    interval = GaugeMetricFamily(
        "tiffin_job_expected_interval_seconds",
        "The longest gap between two ticks of the job's schedule (cron jobs only).",
        labels=["job_name"],
    )
    first_seen = GaugeMetricFamily(
        "tiffin_job_first_seen_timestamp_seconds",
        "When the job was first registered (Unix time): no tick before it is ever claimed.",
        labels=["job_name"],
    )
    registered = dict(Schedule.objects.values_list("job_name", "first_seen_at"))
    for job in registry.all():
        if job.is_cron:
            gap = schedule_interval_seconds(job.cron, job.timezone, now.year)
            if gap is not None:
                interval.add_metric([job.name], gap)
        if job.name in registered:
            first_seen.add_metric([job.name], _seconds(registered[job.name]))
    yield from (interval, first_seen)


@functools.lru_cache(maxsize=256)
def schedule_interval_seconds(expr: str, tz: str, year: int) -> float | None:
    """The longest gap between consecutive ticks of ``expr`` in ``tz`` from the start of
    ``year`` (over INTERVAL_SAMPLE_TICKS ticks or a little over a year, whichever ends
    first, so a local schedule's DST day counts); None for a schedule that never fires."""
    start = datetime(year, 1, 1, tzinfo=UTC)
    ticks = cron.ticks_between(expr, tz, start, start + timedelta(days=400), limit=INTERVAL_SAMPLE_TICKS)
    if len(ticks) < 2:
        ticks = cron.next_ticks(expr, tz, start, 2)
    if len(ticks) < 2:
        return None
    return max((later - earlier).total_seconds() for earlier, later in itertools.pairwise(ticks))


# --- The scrape --------------------------------------------------------------------------


def token_accepted(authorization: str) -> bool:
    """Whether the request's Authorization header satisfies METRICS_BEARER_TOKEN (any
    header does when no token is set)."""
    token: str = settings.METRICS_BEARER_TOKEN
    if not token:
        return True
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def metrics_render(*, now: datetime) -> bytes:
    """The exposition: the database's figures as of ``now`` and the processes' counts."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(now=now))
    directory = metrics_directory()
    if directory is not None:
        MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(registry) + generate_latest(PROCESS_REGISTRY)
