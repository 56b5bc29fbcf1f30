"""Run transitions: an append-only row in job_run_events and one structured log line each."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime

from django.db import connection

from scheduling import queries
from scheduling.models import JobRun, JobRunEvent, RunStatus
from tiffin.db import execute

logger = logging.getLogger("scheduling.runs")

# Rows per INSERT of a bulk write (events on SQLite, the queue's rows): 1,000 events are
# 7,000 parameters, far under PostgreSQL's 65,535 per statement, which server-side binding
# makes a real limit (Django sets no batch size of its own there) should
# SCHEDULER_DUE_BATCH be raised.
BULK_ROWS = 1000


def runs_record(runs: Sequence[JobRun], *, kind: str, now: datetime, message: str = "") -> None:
    """Record that ``runs`` went through transition ``kind`` (started, succeeded, ...)."""
    events_write(runs, kind=kind, now=now, message=message)
    runs_log(runs, kind=kind, now=now, message=message)


def claim_event_kind(run: JobRun) -> str:
    """The event a won claim records: ``skipped`` for a tick claimed as skipped, else ``claimed``."""
    return "skipped" if run.status == RunStatus.SKIPPED else "claimed"


def events_write(runs: Sequence[JobRun], *, kind: str, now: datetime, message: str = "") -> None:
    """The event rows of ``runs_record`` alone, without the log lines: on PostgreSQL one
    INSERT of the runs as arrays (``queries.RECORD_EVENTS``)."""
    if not runs:
        return
    stored = message[:2000]
    if connection.vendor == "sqlite":  # seam: SQLite has no arrays, so the ORM writes the rows there
        events = [
            JobRunEvent(
                run_id=run.id,
                at=now,
                kind=kind,
                attempt=run.attempts,
                fence=run.fence,
                worker=run.worker,
                message=stored,
            )
            for run in runs
        ]
        JobRunEvent.objects.bulk_create(events, batch_size=BULK_ROWS)
        return
    params = {
        "at": now, "kind": kind, "message": stored, "run_ids": [run.id for run in runs],
        "attempts": [run.attempts for run in runs], "fences": [run.fence for run in runs],
        "workers": [run.worker for run in runs],
    }  # fmt: skip
    execute(queries.RECORD_EVENTS, params)


def runs_log(runs: Sequence[JobRun], *, kind: str, now: datetime, message: str = "") -> None:
    """The log lines of a transition whose event rows were written already (a claim
    writes its events in the claim's own statement: ``sql.claim_runs``)."""
    # Built only if someone reads it: a JSON line per run per transition showed in the
    # worker's profile at LOG_LEVEL=WARNING (docs/benchmark-history.md).
    if runs_logged():
        for run in runs:
            logger.info(_log_line(run, kind=kind, now=now, message=message))


def runs_logged() -> bool:
    """Whether transitions are logged (``runs_log`` writes lines at INFO)."""
    return logger.isEnabledFor(logging.INFO)


def _log_line(run: JobRun, *, kind: str, now: datetime, message: str) -> str:
    duration = run.duration(now=now)
    fields = {
        "event": kind,
        "job": run.job_name,
        "subject": run.subject,
        "scheduled_for": run.scheduled_for.isoformat(),
        "run": run.id,
        "fence": run.fence,
        "attempt": run.attempts,
        "duration_s": round(duration.total_seconds(), 3) if duration is not None else None,
        "outcome": run.status,
    }
    if message:
        fields["message"] = message[:300]
    return json.dumps(fields, separators=(",", ":"))
