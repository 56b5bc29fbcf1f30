"""Prometheus figures from the processes that do the work, and the /metrics exposition.

The engine calls the small ``*_count`` / ``*_observe`` functions below at the points
where a claim, a start, a finish or a fence rejection happens; everything about
Prometheus stays in this module and ``operations.metrics`` (the figures read from
the database at scrape time, and the scrape itself).

Counts that describe a database change are added when its transaction commits
(``transaction.on_commit``), so a rolled-back claim or start is never counted and the
totals equal the rows in ``job_runs``. A fence rejection is counted when it happens: the
refusal is the event, whatever becomes of the transaction around it.

**Many processes.** gunicorn and django-q2 fork workers, and each process counts in its
own memory; a scrape reaches one of them. With ``METRICS_MULTIPROC_DIR`` set, every
process writes its counters and histograms to memory-mapped files there (the client's
multiprocess mode) and ``/metrics`` adds up every file, so each server's web and worker
processes report one total. The directory is emptied when the first process starts
(``metrics_process_setup``): each process holds a shared ``flock`` on ``.lock`` for its
life (forked children inherit it), and a starting process that can take the lock
exclusively knows no other process is alive, so the files are from a previous run.
The files of a process that dies while others run are kept: totals never go down while
the server runs. Without the directory (one process, as in tests) the counts are this
process's own.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.db import transaction
from prometheus_client import CollectorRegistry, Counter, Histogram, values

# From a 5-minute safety net (milliseconds late) to a weekly payout caught up after a
# long outage (days late); the top buckets are the misfire look-back's scale.
LATENESS_BUCKETS: tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
LATENESS_BUCKETS += (4 * 3600, 86400, 3 * 86400, 7 * 86400)
# From a batch of cancellations (milliseconds) to a weekly payout over every restaurant (an hour or more).
DURATION_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
DURATION_BUCKETS += (600, 1800, 3600, 2 * 3600, 6 * 3600)

# The instruments live in their own registry: in multiprocess mode the scrape reads the
# files instead, and nothing else in the process registers here.
PROCESS_REGISTRY = CollectorRegistry(auto_describe=True)
# ``job_name``, never ``job``: Prometheus sets ``job`` (and ``instance``) on every scraped
# series itself. Labels are bounded: declared job names and fixed outcomes only.
CLAIMS = Counter(
    "tiffin_claims",
    "Claims (cron ticks, manual runs, backfills) attempted, by whether this process won the row.",
    ["job_name", "result"],
    registry=PROCESS_REGISTRY,
)
RUNS_STARTED = Counter(
    "tiffin_runs_started", "Attempts started (enqueued -> running).", ["job_name"], registry=PROCESS_REGISTRY
)
RETRIES_STARTED = Counter(
    "tiffin_run_retries", "Attempts started after a failed or abandoned one.", ["job_name"], registry=PROCESS_REGISTRY
)
RUNS_FINISHED = Counter(
    "tiffin_runs_finished",
    "Attempts ended, by outcome: succeeded, failed (will retry), abandoned, dead, superseded.",
    ["job_name", "outcome"],
    registry=PROCESS_REGISTRY,
)
FENCE_REJECTIONS = Counter(
    "tiffin_fence_rejections",
    "Writes refused for a stale fence (stage=write, at fence_check) and finishes refused "
    "because the run was no longer this worker's (stage=finish).",
    ["stage"],
    registry=PROCESS_REGISTRY,
)
LOGIN_LOCKOUTS = Counter(
    "tiffin_login_lockouts",
    "Admin login lockouts begun: LOGIN_FAILURE_LIMIT failures reached for an address or a username.",
    registry=PROCESS_REGISTRY,
)
START_LATENESS = Histogram(
    "tiffin_run_start_lateness_seconds",
    "Start of a run's first attempt minus its logical time (scheduled_for).",
    ["job_name"],
    buckets=LATENESS_BUCKETS,
    registry=PROCESS_REGISTRY,
)
RUN_DURATION = Histogram(
    "tiffin_run_duration_seconds",
    "Finish minus start of an attempt that succeeded or failed.",
    ["job_name"],
    buckets=DURATION_BUCKETS,
    registry=PROCESS_REGISTRY,
)

_LOCK_NAME = ".lock"
# The shared lock of this process (kept open for the process's life; see the module doc).
_lock_file: IO[str] | None = None


# --- Hooks the engine calls ----------------------------------------------------------------


def _after_commit(count: Callable[[], None]) -> None:
    """Count once the transaction commits; not at all with metrics off (nothing serves
    them, and every order's claim would pay for it)."""
    if settings.METRICS_ENABLED:
        transaction.on_commit(count)


def claims_count(*, job_name: str, won: int, attempted: int) -> None:
    def count() -> None:
        CLAIMS.labels(job_name, "won").inc(won)
        CLAIMS.labels(job_name, "lost").inc(attempted - won)

    _after_commit(count)


def runs_started_observe(*, runs: Sequence[Any], now: datetime) -> None:
    """Count started runs (JobRun rows after the start) and their first attempts' lateness."""

    def count() -> None:
        for run in runs:
            RUNS_STARTED.labels(run.job_name).inc()
            if run.attempts > 1:
                RETRIES_STARTED.labels(run.job_name).inc()
            else:
                START_LATENESS.labels(run.job_name).observe((now - run.scheduled_for).total_seconds())

    _after_commit(count)


def runs_finished_observe(*, runs: Iterable[Any], outcome: str, now: datetime, timed: bool = True) -> None:
    """Count ended attempts (JobRun rows with ``started_at``) and, when ``timed`` (the
    handler returned or raised, rather than the run being abandoned or superseded),
    their durations."""
    runs = list(runs)

    def count() -> None:
        for run in runs:
            RUNS_FINISHED.labels(run.job_name, str(outcome)).inc()
            if timed and run.started_at is not None:
                RUN_DURATION.labels(run.job_name).observe(max((now - run.started_at).total_seconds(), 0.0))

    _after_commit(count)


# The outcomes RUNS_FINISHED counts, and the stages of FENCE_REJECTIONS.
FINISH_OUTCOMES = ("succeeded", "failed", "abandoned", "dead", "superseded")
FENCE_STAGES = ("write", "finish")


def metrics_series_declare(*, job_names: Iterable[str]) -> None:
    """Create every series of the declared jobs at zero (at start, in the app's ``ready``).

    A counter series born at its first increment has no earlier sample, so Prometheus's
    increase() cannot see that increment: a first dead run would never alert.
    """
    for name in job_names:
        RUNS_STARTED.labels(name)
        RETRIES_STARTED.labels(name)
        START_LATENESS.labels(name)
        RUN_DURATION.labels(name)
        for result in ("won", "lost"):
            CLAIMS.labels(name, result)
        for outcome in FINISH_OUTCOMES:
            RUNS_FINISHED.labels(name, outcome)
    for stage in FENCE_STAGES:
        FENCE_REJECTIONS.labels(stage)


def login_lockout_count() -> None:
    """Count one lockout begun (a refusal, not a database change: counted when it happens)."""
    if settings.METRICS_ENABLED:
        LOGIN_LOCKOUTS.inc()


def fence_rejected_count(*, stage: str, count: int = 1) -> None:
    if count:
        FENCE_REJECTIONS.labels(stage).inc(count)


# --- Processes ---------------------------------------------------------------------------


def metrics_directory() -> Path | None:
    """The multiprocess directory, when metrics are on and one is set."""
    if not settings.METRICS_ENABLED or not settings.METRICS_MULTIPROC_DIR:
        return None
    return Path(settings.METRICS_MULTIPROC_DIR)


def metrics_process_setup() -> None:
    """At process start (the app's ``ready``): switch the client to multiprocess mode
    on ``METRICS_MULTIPROC_DIR`` and empty it if this is the only live process (see the
    module doc). Does nothing without the directory or with metrics off."""
    global _lock_file
    directory = metrics_directory()
    if directory is None or _lock_file is not None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    # The client picks its value class from that variable; it is read when a labelled
    # series is first used, so setting it here, before any count, is in time.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    lock = (directory / _LOCK_NAME).open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pass  # another process is alive and counting: keep its files
    else:
        for stale in directory.glob("*.db"):
            stale.unlink()
    fcntl.flock(lock, fcntl.LOCK_SH)
    _lock_file = lock


def metrics_serve(*, host: str, port: int) -> threading.Thread:
    """Answer /metrics (through Django's own view, token and all) on ``host:port`` in a
    daemon thread; every other path is a 404. For the worker command, after its cluster
    has forked (no child inherits the socket)."""
    from django.core.wsgi import get_wsgi_application

    django_app = get_wsgi_application()

    def metrics_only(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"only /metrics is served here\n"]
        return django_app(environ, start_response)

    server = make_server(host, port, metrics_only, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    return thread


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a scrape every few seconds is not news
        pass
