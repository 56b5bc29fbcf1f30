"""SQLite's versions of the ``scheduling.sql`` functions whose PostgreSQL statement it cannot
run (no arrays, no data-modifying CTE, no row locks): each has its PostgreSQL original's
name and signature, and the original names it with ``tiffin.db.on_sqlite``, so the engine
reads as PostgreSQL's main path and runs this only on SQLite. Its statements are in
``scheduling.queries_sqlite`` (the take's pick, ``DUE_RUN_IDS``, which has no PostgreSQL
twin, is here); the rest is the ORM, in the same transaction.

SQLite's IMMEDIATE transactions (``tiffin.env``) take its one write lock at BEGIN, so what
PostgreSQL serialises with row locks is serial here already.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import fields, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import models, transaction
from django.db.models import Q

from scheduling import queries_sqlite
from scheduling.events import claim_event_kind, events_write
from scheduling.models import JobRun, JobRunEvent, RunStatus
from tiffin.db import adapt, fetch, fetch_instances

if TYPE_CHECKING:
    from scheduling.sql import ClaimRow, SubjectInsert


def claim_runs(rows: Sequence[ClaimRow]) -> list[JobRun]:
    """The claim (``queries_sqlite.CLAIM_RUNS``), the rows as one JSON array, each datetime
    as Django stores it there; then the events through the ORM."""
    if not rows:
        return []
    claims = [{field.name: adapt(getattr(row, field.name)) for field in fields(row)} for row in rows]
    runs = fetch_instances(JobRun, queries_sqlite.CLAIM_RUNS, {"rows": json.dumps(claims)})
    JobRunEvent.objects.bulk_create(
        [JobRunEvent(run_id=run.id, at=run.created_at, kind=claim_event_kind(run), attempt=run.attempts,
                     fence=run.fence, worker=run.worker) for run in runs]
    )  # fmt: skip
    return runs


def claim_run_with_subject(row: ClaimRow, subject: SubjectInsert) -> tuple[tuple[Any, ...], int | None]:
    """The subject's INSERT, then its run's claim, in one atomic block."""
    with transaction.atomic():
        (inserted,) = fetch(subject.sql, subject.params)
        won = claim_runs([replace(row, subject=f"{row.subject}{inserted[0]}")])
    return tuple(inserted), (won[0].id if won else None)


# The take's pick (queries.ENQUEUE_DUE_RUNS's ``due``; the single writer needs no row
# locks): up to ``limit`` due runs of ``job_names`` (a JSON array), earliest due first.
# ``+job_name`` keeps the column out of every index, as array_position does on PostgreSQL:
# unanalysed, SQLite otherwise read every run of the job through job_run_by_job and sorted
# them (200,005 runs: 148 ms a take, now under 1 ms).
DUE_RUN_IDS = """
SELECT id FROM job_runs
WHERE status IN ('scheduled', 'failed', 'abandoned')
  AND due_at <= %(now)s
  AND +job_name IN (SELECT value FROM json_each(%(job_names)s))
ORDER BY due_at
LIMIT %(limit)s
"""


def enqueue_due_runs(*, now: datetime, job_names: Sequence[str], limit: int) -> list[JobRun]:
    """The due runs picked by ``DUE_RUN_IDS``, moved to enqueued and recorded, through the ORM."""
    params = {"now": adapt(now), "job_names": json.dumps(list(job_names)), "limit": limit}
    ids = [row[0] for row in fetch(DUE_RUN_IDS, params)]
    runs = list(JobRun.objects.filter(id__in=ids).order_by("due_at", "id"))
    JobRun.objects.filter(id__in=ids).update(status=RunStatus.ENQUEUED, enqueued_at=now)
    for run in runs:
        run.status, run.enqueued_at = RunStatus.ENQUEUED, now
    events_write(runs, kind="enqueued", now=now)
    return runs


def start_runs(*, run_ids: Sequence[int], fence: int, now: datetime, worker: str) -> list[JobRun]:
    """The enqueued runs of ``run_ids`` moved to running, read back by their new fence and
    recorded, through the ORM."""
    if not run_ids:
        return []
    worker = worker[:200]
    JobRun.objects.filter(id__in=run_ids, status=RunStatus.ENQUEUED).update(
        status=RunStatus.RUNNING, fence=fence, attempts=models.F("attempts") + 1, started_at=now,
        heartbeat_at=now, finished_at=None, worker=worker,
    )  # fmt: skip
    started = list(JobRun.objects.filter(id__in=run_ids, fence=fence).order_by("id"))
    events_write(started, kind="started", now=now)
    return started


def succeed_runs(runs: Sequence[JobRun], *, now: datetime, result: Any) -> set[int]:
    """The runs still running with their fences read, then marked succeeded, through the ORM."""
    if not runs:
        return set()
    ids = set(JobRun.objects.select_for_update().filter(_owned_by_fence(runs)).values_list("id", flat=True))
    JobRun.objects.filter(id__in=ids).update(status=RunStatus.SUCCEEDED, finished_at=now, result=result, error="")
    return ids


def _owned_by_fence(runs: Sequence[JobRun]) -> Q:
    """Each of ``runs`` still running with its fence: one condition per fence (a started
    batch shares one)."""
    condition = Q(pk__in=[])
    for fence, group in itertools.groupby(sorted(runs, key=_fence_key), key=_fence_key):
        condition |= Q(id__in=[run.id for run in group], status=RunStatus.RUNNING, fence=fence)
    return condition


def _fence_key(run: JobRun) -> int:
    return run.fence if run.fence is not None else -1


def hold_run_if_current(run_id: int, fence: int) -> bool:
    """Whether the run is still running under ``fence``: no lock to take, the transaction
    holds SQLite's write lock."""
    return JobRun.objects.filter(id=run_id, status=RunStatus.RUNNING, fence=fence).exists()
