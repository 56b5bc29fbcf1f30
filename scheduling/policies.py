"""Pure policy decisions (no database): which missed ticks run and which are skipped
(misfire), and whether a run may start beside the job's other runs (overlap). Callers
read what a decision needs and pass it in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Protocol, TypeVar

from django.conf import settings

from scheduling.models import Misfire, Overlap, RunStatus, SkipReason
from scheduling.registry import Job


@dataclass(frozen=True)
class PlannedTick:
    scheduled_for: datetime
    status: RunStatus
    skip_reason: str = ""


def misfire_plan(*, job: Job, ticks: list[datetime], now: datetime, paused: bool, limit: int) -> list[PlannedTick]:
    """Decide the fate of the oldest ``limit`` due ticks (ascending, all <= now).

    1. A paused job records every tick as skipped (paused), so resuming does not
       replay the pause.
    2. catch_up runs every tick.
    3. coalesce runs only the latest due tick; the older ones are recorded as coalesced.
    4. deadline runs a tick unless it is more than the deadline late.
    Every tick gets a row, oldest first: after a long outage the rest come in the next
    passes, so no missed tick is left without a record of what happened to it.
    """
    latest = ticks[-1] if ticks else None
    return [_decide(job=job, tick=tick, latest=latest, now=now, paused=paused) for tick in ticks[:limit]]


def _decide(*, job: Job, tick: datetime, latest: datetime | None, now: datetime, paused: bool) -> PlannedTick:
    if paused:
        return PlannedTick(tick, RunStatus.SKIPPED, SkipReason.PAUSED)
    if job.misfire == Misfire.COALESCE and tick != latest:
        return PlannedTick(tick, RunStatus.SKIPPED, SkipReason.COALESCED)
    deadline = timedelta(seconds=job.misfire_deadline_seconds or 0)
    if job.misfire == Misfire.DEADLINE and now - tick > deadline:
        return PlannedTick(tick, RunStatus.SKIPPED, SkipReason.MISSED_DEADLINE)
    return PlannedTick(tick, RunStatus.ENQUEUED)


class _Run(Protocol):
    @property
    def scheduled_for(self) -> datetime: ...


RunT = TypeVar("RunT", bound=_Run)


class OverlapDecision(Enum):
    START = "start"
    WAIT = "wait"
    SKIP = "skip"


def overlap_blockers(
    *, policy: str, scheduled_for: datetime, running: Sequence[RunT], waiting: Sequence[RunT]
) -> list[RunT]:
    """The runs that keep a run at ``scheduled_for`` from starting now under the overlap
    ``policy`` (the run's own, else its job's), of the job's other ``running`` runs and the
    ``waiting`` ones (enqueued, not started; only a queue policy needs them).

    1. queue: every running run, and every older waiting run (they go first, oldest first);
    2. forbid: every running run;
    3. replace: a running run with a later logical time (an older one is superseded instead);
    4. allow: none.
    """
    if policy == Overlap.QUEUE:
        older = sorted((run for run in waiting if run.scheduled_for < scheduled_for), key=lambda run: run.scheduled_for)
        return [*running, *older]
    if policy == Overlap.REPLACE:
        return [other for other in running if other.scheduled_for > scheduled_for]
    if policy == Overlap.FORBID:
        return list(running)
    return []


def overlap_decide(*, policy: str, blockers: Sequence[object]) -> OverlapDecision:
    """Start when nothing blocks; otherwise a queue policy waits and any other is skipped."""
    if not blockers:
        return OverlapDecision.START
    return OverlapDecision.WAIT if policy == Overlap.QUEUE else OverlapDecision.SKIP


# Beyond the look-back and the check's window: a scheduler whose pass started long ago (a
# paused process, a slow clock) still looks back from its own, earlier ``now``.
GUARD_MARGIN = timedelta(days=1)


def claim_guard_horizon(*, now: datetime) -> datetime:
    """The earliest logical time whose claim is guaranteed to be remembered at ``now``.

    The scheduler never claims a tick older than its look-back, and the missed-run check
    never judges one older than its window; past both and a margin, a cron job's claim
    rows may be pruned. Manual claims, backfills and re-runs refuse instants before it
    (there "not claimed" no longer proves "never ran"), and the pruner keeps everything
    of a cron job after it.
    """
    window = max(settings.SCHEDULER_LOOKBACK_SECONDS, settings.SCHEDULER_CHECK_WINDOW_SECONDS)
    return now - timedelta(seconds=window) - GUARD_MARGIN
