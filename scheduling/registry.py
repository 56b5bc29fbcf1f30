"""Declaring jobs.

Apps declare their jobs in their own ``jobs.py``::

    @job(CLEAN_CARTS_JOB, cron="0 2 * * *", misfire=Misfire.COALESCE, overlap=Overlap.FORBID)
    def clean_carts(ctx: RunContext) -> dict[str, int]: ...

    @job(CANCEL_STALE_ORDER_JOB, delayed=True, batch_size=200)
    def cancel_stale_order(batch: list[RunContext]) -> dict[str, int]: ...

``retention_days`` says how long its finished runs are kept (default: the setting;
None: forever). ``backfill_refused`` says why the job refuses backfills, and ``earliest``
gives the first logical time a run of it could mean anything (manual runs, backfills and
re-runs before it are refused). A job is either a cron job (five-field expression, optional IANA zone) or a delayed job
(one-off runs created by code). A delayed job with ``batch_size > 1`` receives a list of
contexts, so one worker task executes many due runs with set-based statements.
Validation happens in the system check (``scheduling.checks``), so a bad declaration
stops the process at start with the job's name in the message.

The convention every job app follows (``orders``, ``carts``, ``payouts``; a new one too):

1. Job names are constants in the app's ``models.py`` (``PAYOUT_JOB``,
   ``CLEAN_CARTS_JOB``), so ``jobs.py``, ``services.py`` and ``selectors.py`` all name
   them without a read importing a write.
2. ``services.py`` writes and ``selectors.py`` reads; selectors never import services.
3. The errors a caller can cause live in the app's ``errors.py``, each with its message.
4. The handler passes the logical time on as ``as_of=ctx.scheduled_for`` (never as
   ``now``): ``now`` is the clock, read at the edge.
5. Batch sizes come from a setting with a documented default (``PAYOUT_BATCH_SIZE``,
   ``CART_CLEANUP_BATCH_SIZE``, ``ORDER_CANCEL_BATCH_SIZE``), which the job passes as the
   service's ``batch_size``.
6. A service that works in batches reports each through ``on_batch``; a handler passes
   ``ctx.batch_done``, which heartbeats and tells a caller that executes the run in its
   own process (``catch_up_payouts``' progress display).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from scheduling.models import JobKind, Misfire, Overlap

Handler = Callable[..., Any]


class _Setting(Enum):
    RETENTION = "SCHEDULER_RUN_RETENTION_DAYS"


# ``retention_days`` default: the SCHEDULER_RUN_RETENTION_DAYS setting, read when pruning.
SETTING_RETENTION: Literal[_Setting.RETENTION] = _Setting.RETENTION
Retention = int | None | Literal[_Setting.RETENTION]
# ``timeout_seconds`` default, and the timeout the missed-run check gives the runs of a
# job no longer declared.
DEFAULT_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class Job:
    name: str
    handler: Handler
    kind: JobKind
    cron: str = ""
    timezone: str = "UTC"
    overlap: Overlap = Overlap.ALLOW
    misfire: Misfire = Misfire.CATCH_UP
    misfire_deadline_seconds: int | None = None
    max_attempts: int = 3
    backoff_seconds: float = 30.0
    # A running run that shows no sign of life (heartbeat, or start if it does not
    # heartbeat) for this long is abandoned.
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    heartbeat: bool = False
    batch_size: int = 1
    # Days a finished run is kept (operations.retention); None keeps every run forever
    # (a payout run is the ledger's provenance).
    retention_days: Retention = SETTING_RETENTION
    # Why a backfill of this job is refused (empty: backfills are allowed); the message
    # names what to do instead (a payout backfill only queues runs before the real tick).
    backfill_refused: str = ""
    # The earliest logical time a run of this job can mean anything (None: no bound
    # beyond the engine's): manual runs, backfills and re-runs before it are refused.
    earliest: Callable[[], datetime | None] | None = None

    @property
    def is_cron(self) -> bool:
        return self.kind == JobKind.CRON

    def backoff_for(self, attempt: int) -> float:
        """Seconds to wait before the attempt after ``attempt`` (exponential, capped at 1 h)."""
        return float(min(self.backoff_seconds * 2 ** max(attempt - 1, 0), 3600.0))


class JobRegistry:
    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}

    def add(self, job: Job) -> Job:
        existing = self._jobs.get(job.name)
        if existing is not None and existing.handler is not job.handler:
            raise ValueError(f"job {job.name!r} is declared twice")
        self._jobs[job.name] = job
        return job

    def get(self, name: str) -> Job:
        try:
            return self._jobs[name]
        except KeyError:
            known = ", ".join(sorted(self._jobs)) or "none"
            raise UnknownJobError(f"unknown job {name!r} (known jobs: {known})") from None

    def find(self, name: str) -> Job | None:
        """The job declared as ``name``, or None (a run of a job no longer declared)."""
        return self._jobs.get(name)

    @contextmanager
    def replaced(self, *jobs: Job) -> Iterator[None]:
        """Temporarily declare exactly ``jobs`` (tests of the engine use their own jobs)."""
        saved = self._jobs
        self._jobs = {job.name: job for job in jobs}
        try:
            yield
        finally:
            self._jobs = saved

    def has(self, name: str) -> bool:
        return name in self._jobs

    def all(self) -> list[Job]:
        return [self._jobs[name] for name in sorted(self._jobs)]

    def cron_jobs(self) -> list[Job]:
        return [job for job in self.all() if job.is_cron]


class UnknownJobError(LookupError):
    pass


registry = JobRegistry()


def job(
    name: str,
    *,
    cron: str | None = None,
    delayed: bool = False,
    timezone: str = "UTC",
    overlap: Overlap = Overlap.ALLOW,
    misfire: Misfire = Misfire.CATCH_UP,
    misfire_deadline_seconds: int | None = None,
    max_attempts: int = 3,
    backoff_seconds: float = 30.0,
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    heartbeat: bool = False,
    batch_size: int = 1,
    retention_days: Retention = SETTING_RETENTION,
    backfill_refused: str = "",
    earliest: Callable[[], datetime | None] | None = None,
) -> Callable[[Handler], Handler]:
    """Declare ``name`` with either ``cron=`` or ``delayed=True``; see the module doc."""

    def register(handler: Handler) -> Handler:
        registry.add(
            Job(
                name=name,
                handler=handler,
                kind=JobKind.DELAYED if delayed else JobKind.CRON,
                cron=cron or "",
                timezone=timezone,
                overlap=overlap,
                misfire=misfire,
                misfire_deadline_seconds=misfire_deadline_seconds,
                max_attempts=max_attempts,
                backoff_seconds=backoff_seconds,
                timeout_seconds=timeout_seconds,
                heartbeat=heartbeat,
                batch_size=batch_size,
                retention_days=retention_days,
                backfill_refused=backfill_refused,
                earliest=earliest,
            )
        )
        return handler

    return register
