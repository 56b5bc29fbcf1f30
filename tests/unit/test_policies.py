"""Misfire planning is pure: ticks in, decisions out."""

from __future__ import annotations

from datetime import timedelta

from scheduling.models import Misfire, RunStatus, SkipReason
from scheduling.policies import misfire_plan
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
