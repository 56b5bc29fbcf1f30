"""The policies are pure: ticks (or the job's other runs) in, decisions out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduling.models import Misfire, Overlap, RunStatus, SkipReason
from scheduling.policies import OverlapDecision, misfire_plan, overlap_blockers, overlap_decide
from tests.engine import T0, make_job

TICKS = [T0 + timedelta(minutes=10 * n) for n in range(6)]
NOW = TICKS[-1] + timedelta(minutes=1)


def _plan(misfire, *, limit=500, paused=False, **policies):
    job = make_job(misfire=misfire, **policies)
    return [
        (p.scheduled_for, p.status, p.skip_reason)
        for p in misfire_plan(job=job, ticks=TICKS, now=NOW, paused=paused, limit=limit)
    ]


def test_catch_up_runs_the_oldest_ticks_first_up_to_the_limit():
    assert _plan(Misfire.CATCH_UP, limit=4) == [(t, RunStatus.ENQUEUED, "") for t in TICKS[:4]]


def test_coalesce_runs_only_the_latest_tick():
    plan = _plan(Misfire.COALESCE)
    assert plan[-1] == (TICKS[-1], RunStatus.ENQUEUED, "")
    assert {p[1:] for p in plan[:-1]} == {(RunStatus.SKIPPED, SkipReason.COALESCED)}


def test_coalesce_with_a_limit_records_the_oldest_ticks_first_as_coalesced():
    assert _plan(Misfire.COALESCE, limit=2) == [(t, RunStatus.SKIPPED, SkipReason.COALESCED) for t in TICKS[:2]]


def test_deadline_skips_ticks_later_than_the_deadline():
    plan = _plan(Misfire.DEADLINE, misfire_deadline_seconds=25 * 60)
    late = [p[0] for p in plan if p[2] == SkipReason.MISSED_DEADLINE]
    # NOW is 51 minutes after T0: ticks at +0, +10 and +20 are more than 25 minutes late.
    assert late == TICKS[:3]
    assert [p[1] for p in plan[3:]] == [RunStatus.ENQUEUED] * 3


def test_a_paused_job_skips_everything_whatever_its_policy():
    assert {p[1:] for p in _plan(Misfire.CATCH_UP, paused=True)} == {(RunStatus.SKIPPED, SkipReason.PAUSED)}


def test_backoff_doubles_per_attempt_and_is_capped():
    job = make_job(backoff_seconds=30)
    assert [job.backoff_for(n) for n in (1, 2, 3)] == [30, 60, 120]
    assert job.backoff_for(30) == 3600


# --- Overlap: what blocks a run at TICKS[2], given the job's other runs -----------------


@dataclass(frozen=True)
class _Run:
    name: str
    scheduled_for: datetime


OLDER_RUNNING = _Run("older running", TICKS[1])
NEWER_RUNNING = _Run("newer running", TICKS[3])
OLDER_WAITING = [_Run("oldest waiting", TICKS[0]), _Run("older waiting", TICKS[1])]
NEWER_WAITING = _Run("newer waiting", TICKS[4])


def _blockers(overlap, *, running=(OLDER_RUNNING, NEWER_RUNNING), waiting=(NEWER_WAITING, *OLDER_WAITING[::-1])):
    job = make_job(overlap=overlap)
    blockers = overlap_blockers(
        policy=job.overlap, scheduled_for=TICKS[2], running=list(running), waiting=list(waiting)
    )
    return [run.name for run in blockers], overlap_decide(policy=job.overlap, blockers=blockers)


def test_queue_waits_behind_every_running_run_and_the_older_waiting_ones_oldest_first():
    assert _blockers(Overlap.QUEUE) == (
        ["older running", "newer running", "oldest waiting", "older waiting"],
        OverlapDecision.WAIT,
    )


def test_queue_starts_when_nothing_runs_and_only_newer_runs_wait():
    assert _blockers(Overlap.QUEUE, running=(), waiting=(NEWER_WAITING,)) == ([], OverlapDecision.START)


def test_forbid_skips_beside_any_running_run_and_ignores_waiting_ones():
    assert _blockers(Overlap.FORBID) == (["older running", "newer running"], OverlapDecision.SKIP)
    assert _blockers(Overlap.FORBID, running=()) == ([], OverlapDecision.START)


def test_replace_is_blocked_only_by_a_newer_running_run():
    assert _blockers(Overlap.REPLACE) == (["newer running"], OverlapDecision.SKIP)
    assert _blockers(Overlap.REPLACE, running=(OLDER_RUNNING,)) == ([], OverlapDecision.START)


def test_allow_always_starts():
    assert _blockers(Overlap.ALLOW) == ([], OverlapDecision.START)
