"""History retention: what the hourly ``prune-history`` job forgets, and the claim guard
horizon that nothing inside is ever forgotten and nothing before is claimed by hand.

Every order leaves a delayed run and its events, every tick a row; without pruning
job_runs grows by millions of rows a month. ``history_prune`` deletes, in short batches
(each its own transaction, the condition re-checked at delete time):

1. finished runs (succeeded, skipped, superseded) whose ``finished_at`` is older than
   their job's retention (SCHEDULER_RUN_RETENTION_DAYS, or ``@job(retention_days=...)``;
   None keeps every run), dead ones past SCHEDULER_DEAD_RUN_RETENTION_DAYS, with their
   events and any other rows that cascade from them. Never a run that is live or will be
   retried (scheduled, enqueued, running, failed, abandoned); never the newest cron tick
   of a job (the scheduler's cursor); never a run of a cron job whose tick is inside the
   claim guard horizon; never a run another table keeps (a payout's ``job_run``);
2. django-q2's results past the same periods (successes like finished runs, failures
   like dead ones), and queue entries that can no longer start anything;
3. alerts resolved more than SCHEDULER_ALERT_RETENTION_DAYS ago, and scheduler nodes
   whose last pass is older than SCHEDULER_NODE_RETENTION_DAYS;
4. django-axes' login records: failed-login counts past the lockout's cool-off (they
   count for nothing any more; django-axes itself deletes them only when someone next
   logs in), and its logs of logins and failures older than LOGIN_LOG_RETENTION_DAYS.

Age is judged by ``finished_at``: every final status sets it (a tick skipped at its
claim, by overlap or as superseded included), and it is the moment the row stopped
changing. ``scheduled_for`` would not do for delayed runs (a run due next month is not
old) nor for a run that died after days of retries.

The horizon bounds the runs of cron jobs only. Their claim rows are what makes a late,
skewed or repeated INSERT of the same tick lose, and a pass looks back
SCHEDULER_LOOKBACK_SECONDS for ticks without one. A delayed run is claimed once, by the
code that creates its subject, in the subject's transaction; no pass ever claims it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from axes.models import AccessAttempt, AccessFailureLog, AccessLog  # type: ignore[import-untyped]
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django_q.models import OrmQ, Task

from scheduling import sql
from scheduling.models import JobRun, RunAlert, RunStatus, SchedulerNode
from scheduling.policies import claim_guard_horizon
from scheduling.queue import EXECUTE_TASK
from scheduling.registry import SETTING_RETENTION, registry


@dataclass(frozen=True)
class HistoryPrune:
    """What one prune deleted."""

    runs: int = 0
    cascaded: int = 0  # rows deleted with the runs: their events, probe charges
    task_results: int = 0
    queued_tasks: int = 0
    alerts: int = 0
    nodes: int = 0
    logins: int = 0  # django-axes' attempts and logs
    batches: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def __add__(self, other: HistoryPrune) -> HistoryPrune:
        return HistoryPrune(**{name: value + getattr(other, name) for name, value in asdict(self).items()})


OnBatch = Callable[[HistoryPrune], None]


def history_prune(*, now: datetime, batch_size: int, on_batch: OnBatch | None = None) -> HistoryPrune:
    """Delete what retention allows as of ``now`` (see the module doc for the steps);
    ``on_batch`` gets the running totals after each committed batch."""
    total = HistoryPrune()

    def progress(step: HistoryPrune) -> None:
        nonlocal total
        total += step
        if on_batch is not None:
            on_batch(total)

    for rule in prune_rules(now=now):
        runs_prune(rule=rule, batch_size=batch_size, on_batch=progress)
    run_cutoff, dead_cutoff = _cutoffs(now=now)
    rows_prune(Task.objects.filter(success=True, stopped__lt=run_cutoff), "task_results", batch_size, progress)
    rows_prune(Task.objects.filter(success=False, stopped__lt=dead_cutoff), "task_results", batch_size, progress)
    queue_prune(now=now, batch_size=batch_size, on_batch=progress)
    resolved = now - timedelta(days=settings.SCHEDULER_ALERT_RETENTION_DAYS)
    rows_prune(RunAlert.objects.filter(resolved_at__lt=resolved), "alerts", batch_size, progress)
    unseen = now - timedelta(days=settings.SCHEDULER_NODE_RETENTION_DAYS)
    rows_prune(SchedulerNode.objects.filter(last_pass_at__lt=unseen), "nodes", batch_size, progress)
    expired = now - settings.AXES_COOLOFF_TIME
    rows_prune(AccessAttempt.objects.filter(attempt_time__lt=expired), "logins", batch_size, progress)
    logged = now - timedelta(days=settings.LOGIN_LOG_RETENTION_DAYS)
    rows_prune(AccessLog.objects.filter(attempt_time__lt=logged), "logins", batch_size, progress)
    rows_prune(AccessFailureLog.objects.filter(attempt_time__lt=logged), "logins", batch_size, progress)
    return total


def _cutoffs(*, now: datetime) -> tuple[datetime, datetime]:
    """(finished before, dead before) under the default retention."""
    finished = now - timedelta(days=settings.SCHEDULER_RUN_RETENTION_DAYS)
    return finished, now - timedelta(days=settings.SCHEDULER_DEAD_RUN_RETENTION_DAYS)


def prune_rules(*, now: datetime) -> list[sql.PruneRule]:
    """One rule for the jobs on the default retention (and rows of jobs no longer
    declared), one per job with its own; none for a job that keeps its runs.

    A job's own retention also holds for its dead runs when it is longer than theirs.
    """
    finished, dead = _cutoffs(now=now)
    horizon = claim_guard_horizon(now=now)
    own = {job.name: job.retention_days for job in registry.all() if job.retention_days is not SETTING_RETENTION}
    default = sql.PruneRule(finished, dead, horizon, job_names=tuple(sorted(own)), other_jobs=True)
    rules = [default]
    for name, days in sorted(own.items()):
        if isinstance(days, int):
            cutoff = now - timedelta(days=days)
            rules.append(
                replace(
                    default, finished_before=cutoff, dead_before=min(cutoff, dead), job_names=(name,), other_jobs=False
                )
            )
    return rules


def runs_prune(*, rule: sql.PruneRule, batch_size: int, on_batch: OnBatch) -> None:
    """Delete the runs ``rule`` allows, ``batch_size`` at a time, oldest finished first.

    Each batch is one transaction: pick (locked on PostgreSQL, skipping rows others
    hold), then delete what still qualifies. The pass resumes after the last key picked
    and never goes back, so a run skipped because someone held it waits for the next hour.
    """
    after: tuple[Any, int] | None = None
    while True:
        with transaction.atomic():
            sql.prune_batch_begin()
            picked = sql.prunable_runs_pick(rule, after=after, limit=batch_size)
            if not picked:
                return
            runs, cascaded = sql.prunable_runs_delete(rule, run_ids=[run_id for _, run_id in picked])
        after = picked[-1]
        on_batch(HistoryPrune(runs=runs, cascaded=cascaded, batches=1))
        if len(picked) < batch_size:
            return


def rows_prune(queryset: QuerySet[Any], field: str, batch_size: int, on_batch: OnBatch) -> None:
    """Delete the rows of ``queryset`` in primary-key batches, each re-checking its filter
    in its own transaction, through Django's delete, which also removes the rows that point
    at them (django-axes' expiration row of an attempt)."""
    while True:
        with transaction.atomic():
            picked = list(
                queryset.select_for_update(skip_locked=True).order_by("pk").values_list("pk", flat=True)[:batch_size]
            )
            if not picked:
                return
            deleted, _ = queryset.filter(pk__in=picked).delete()
        on_batch(HistoryPrune(**{field: deleted, "batches": 1}))
        if len(picked) < batch_size:
            return


def queue_prune(*, now: datetime, batch_size: int, on_batch: OnBatch) -> None:
    """Delete django-q2 queue entries that can no longer start anything.

    A task starts its runs only if they are ``enqueued`` (the start is conditional), and
    a run that leaves that state and comes back to it (a retry, a re-run, a queue
    hand-off, the requeue sweep) always gets a task of its own. So an entry none of whose
    runs is enqueued, and that has waited longer than the requeue delay (the normal flow
    takes it well before that), is dead weight: a worker would take it, start nothing and
    delete it. Entries of other tasks, and ones that cannot be read, are not the engine's.
    """
    waited = now - timedelta(seconds=settings.SCHEDULER_REQUEUE_AFTER_SECONDS)
    after_id = 0
    while True:
        with transaction.atomic():
            entries = list(
                OrmQ.objects.select_for_update(skip_locked=True)
                .filter(lock__lt=waited, id__gt=after_id)
                .order_by("id")[:batch_size]
            )
            if not entries:
                return
            stale = _entries_stale(entries)
            deleted, _ = OrmQ.objects.filter(id__in=stale, lock__lt=waited).delete() if stale else (0, {})
        after_id = entries[-1].id
        on_batch(HistoryPrune(queued_tasks=deleted, batches=1))
        if len(entries) < batch_size:
            return


def _entries_stale(entries: list[OrmQ]) -> list[int]:
    """The ids of the entries (of execute_runs tasks) none of whose runs is enqueued."""
    runs_of: dict[int, list[int]] = {}
    for entry in entries:
        task: dict[str, Any] = entry.task
        args = list(task.get("args") or ())
        if task.get("func") == EXECUTE_TASK and len(args) == 1 and isinstance(args[0], list):
            runs_of[entry.id] = [int(run_id) for run_id in args[0]]
    wanted = {run_id for run_ids in runs_of.values() for run_id in run_ids}
    enqueued = set(JobRun.objects.filter(id__in=wanted, status=RunStatus.ENQUEUED).values_list("id", flat=True))
    return [entry_id for entry_id, run_ids in runs_of.items() if not enqueued.intersection(run_ids)]
