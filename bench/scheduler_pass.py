"""Benchmark 7: the scheduler pass as the number of declared cron jobs grows.

5, 50 and 500 cron jobs (generated: ``bench/cron_jobs.py``, every minute each), each size
in a database of its own. After a first pass registers them, ``--passes`` passes one
simulated minute apart each find one due tick per job, claim it and enqueue its task.

- project: ``scheduling.dispatch.tick_pass`` in this process, timed pass by pass: the
  schedules and every cursor read (and the registration upsert if a declaration
  changed), per job its ticks, the misfire plan, the claim (``INSERT ... ON CONFLICT DO
  NOTHING RETURNING``) with its django-q2 enqueue and its event in one transaction; the
  abandon, due-run and requeue probe; and ``next_wakeup``, which the loop runs after
  every pass (it was not timed before).
- reference: the same work by hand with bare psycopg. Per pass it reads every job's cursor
  (its last claimed cron tick) with one statement, the project's own
  (``scheduling.queries.SCHEDULE_STATES``, over ``bench_schedules`` and ``bench_claims``), and
  computes each job's due ticks after it with the project's cron code
  (``scheduling.cron.ticks_between``); then per job and tick one transaction of the claim
  (the same INSERT into ``bench_claims``, a copy of job_runs with its unique key and
  indexes) with its ``claimed`` event (into ``bench_events``, a copy of job_run_events with
  its foreign key, in the claim's statement) and a task row (into ``bench_queue``, a copy
  of django-q2's queue table). Its jobs are rows of ``bench_schedules`` (a copy of
  job_schedules), written before the timed passes as the project's first pass registers.
  It once wrote no event, and it once was handed each minute's tick without reading any
  state: a scheduler must learn where each job stands before it can claim (a restart
  must see what it missed), and the project does, so neither did the same work.

Reported per size: the time of all passes beside the reference's, claims per second, and
the time per claim from the smallest size to the largest. Goals: at most 1.2 x the
reference at every size, time per claim flat (within 1.5 x), every tick claimed once.

    python -m bench.scheduler_pass [--sizes 5,50,500] [--passes 5]
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from bench.common import (
    Report,
    Row,
    command_line,
    database_create,
    database_drop,
    django_setup,
    fmt,
    official_run,
    sql_run,
    sql_value,
)
from bench.curves import Point, curve_report, curve_rows, point_write, points_measure, sizes_parse

NAME = "scheduler_pass"
CRON_JOB_PREFIX = "bench-cron-"  # the jobs bench/cron_jobs.py declares
T0 = datetime(2027, 3, 1, tzinfo=UTC)
REFERENCE_SETUP = """
CREATE TABLE bench_claims (LIKE job_runs INCLUDING ALL);
CREATE TABLE bench_queue (LIKE django_q_ormq INCLUDING ALL);
CREATE TABLE bench_events (LIKE job_run_events INCLUDING ALL);
CREATE TABLE bench_schedules (LIKE job_schedules INCLUDING ALL);
ALTER TABLE bench_events ADD FOREIGN KEY (run_id) REFERENCES bench_claims (id) DEFERRABLE INITIALLY DEFERRED;
"""
# The claim and its ``claimed`` event in one statement, as the design requires of every
# claim and as the project writes them (scheduling/queries.py CLAIM_RUNS).
REFERENCE_CLAIM = (
    "WITH claimed AS (INSERT INTO bench_claims (job_name, subject, scheduled_for, due_at, status, trigger, "
    "created_at, enqueued_at, finished_at, skip_reason, attempts, worker, error) "
    "VALUES (%s, '', %s, %s, 'enqueued', 'cron', %s, %s, NULL, '', 0, '', '') "
    "ON CONFLICT (job_name, subject, scheduled_for) DO NOTHING RETURNING id, created_at, attempts, fence, worker), "
    "recorded AS (INSERT INTO bench_events (run_id, at, kind, attempt, fence, worker, message) "
    "SELECT id, created_at, 'claimed', attempts, fence, worker, '' FROM claimed) "
    "SELECT id FROM claimed"
)
REFERENCE_ENQUEUE = "INSERT INTO bench_queue (key, payload, lock) VALUES (%s, %s, NULL)"
# The reference's jobs, as the project registers a declared cron job (bench/cron_jobs.py).
REFERENCE_SCHEDULES = (
    "INSERT INTO bench_schedules (job_name, kind, cron, timezone, overlap, misfire, misfire_deadline_seconds,"
    " max_attempts, backoff_seconds, timeout_seconds, heartbeat, batch_size, first_seen_at, registered_at, paused,"
    " paused_by) SELECT %(prefix)s || i, 'cron', %(cron)s, 'UTC', 'allow', 'catch_up', NULL, 3, 30, 600, false, 1,"
    " %(t0)s, %(t0)s, false, '' FROM generate_series(0, %(size)s - 1) AS i"
)
REFERENCE_CRON = "* * * * *"


def reference_cursors_statement() -> str:
    """The project's schedules-and-cursors statement (``scheduling.queries.SCHEDULE_STATES``)
    over the reference's tables."""
    from scheduling.queries import SCHEDULE_STATES

    return SCHEDULE_STATES.replace("job_runs", "bench_claims").replace("job_schedules", "bench_schedules")


def point(size: int, passes: int) -> Point:
    """One size, in a database of its own (dropped afterwards)."""
    name = f"{NAME}_{size}"
    url = database_create(name)
    try:
        sql_run(url, REFERENCE_SETUP)
        sql_run(url, REFERENCE_SCHEDULES, {"prefix": CRON_JOB_PREFIX, "cron": REFERENCE_CRON, "t0": T0, "size": size})
        # Before the reference: it reads its cursors with the project's statement text.
        django_setup(url, SCHEDULER_EXTRA_JOB_MODULES="bench.cron_jobs", BENCH_CRON_JOBS=str(size))
        reference = reference_run(url, size, passes)
        project, claimed = project_run(passes)
        # The app's own cron jobs claim their ticks in the same passes (cancel-stale-orders
        # at the fifth minute): every enqueued run of any job must have its one task.
        tasks = sql_value(url, "SELECT count(*) FROM django_q_ormq")
        enqueued = sql_value(url, "SELECT count(*) FROM job_runs WHERE status = 'enqueued'")
        extra = {"claimed": claimed, "tasks": tasks, "enqueued": enqueued}
        return Point(size=size, units=size * passes, project=project, reference=reference, extra=extra)
    finally:
        from django.db import connections

        connections.close_all()
        database_drop(name)


def project_run(passes: int) -> tuple[float, int]:
    """A first pass registers the jobs (untimed); then ``passes`` timed ones, a minute apart."""
    from scheduling.dispatch import next_wakeup, tick_pass

    tick_pass(now=T0)
    seconds, claimed = 0.0, 0
    for minute in range(1, passes + 1):
        started = time.perf_counter()
        report = tick_pass(now=T0 + timedelta(minutes=minute))
        # The loop asks when to wake after every pass (scheduling/loop.py): part of a pass's cost.
        next_wakeup(now=report.now, report=report)
        seconds += time.perf_counter() - started
        claimed += sum(1 for c in report.claimed if c.job_name.startswith(CRON_JOB_PREFIX))
    return seconds, claimed


def reference_run(url: str, size: int, passes: int) -> float:
    """``passes`` passes a minute apart: 1. every job's cursor, one statement; 2. each job's
    due ticks after it (or after its first sighting); 3. per tick one transaction of
    the claim with its event and, if won, a task row."""
    from scheduling import cron

    names = [f"{CRON_JOB_PREFIX}{i}" for i in range(size)]
    cursors_statement = reference_cursors_statement()
    # Autocommit, as Django's connection: the read is one statement, each claim's BEGIN ... COMMIT explicit.
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        for minute in range(1, passes + 1):
            now = T0 + timedelta(minutes=minute)
            # job_name, first_seen_at, ..., cursor: each job's due ticks after its cursor or first sighting.
            stored = {row[0]: max(row[1], row[-1] or row[1]) for row in conn.execute(cursors_statement)}
            for name in names:
                for tick in cron.ticks_between(REFERENCE_CRON, "UTC", stored[name], now):
                    with conn.transaction():
                        won = conn.execute(REFERENCE_CLAIM, [name, tick, tick, now, now]).fetchone()
                        if won:
                            conn.execute(REFERENCE_ENQUEUE, [f"task-{won[0]}", f"run {won[0]}"])
            # When to wake: the next tick of any job (it has no delayed runs to ask for).
            min(cron.next_ticks(REFERENCE_CRON, "UTC", now, 1)[0] for _ in names)
        return time.perf_counter() - started


def main() -> int:
    parser = argument_parser()
    args = parser.parse_args()
    if args.passes < 1:
        parser.error("--passes must be at least 1")
    if args.point:
        point_write(args.point, point(args.size, args.passes))
        return 0
    try:
        sizes = sizes_parse(args.sizes)
    except ValueError as error:
        parser.error(str(error))
    points = points_measure(NAME, sizes, ["--passes", str(args.passes)])
    return report(args, points, partial=not official_run("scheduler_pass", args, parser.parse_args)).finish()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5,50,500", help="declared cron jobs per size, comma-separated")
    parser.add_argument("--passes", type=int, default=5, help="timed passes per size, a simulated minute apart")
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--point", type=Path, help=argparse.SUPPRESS)
    return parser


def report(args: argparse.Namespace, points: list[Point], *, partial: bool) -> Report:
    rep = Report(
        name=NAME,
        partial=partial,
        title=f"7. scheduler pass: {', '.join(f'{p.size:,}' for p in points)} cron jobs, {args.passes} passes each",
        command=command_line("bench.scheduler_pass"),
        project="tick_pass: schedules + cursors, per job ticks + claim + q2 enqueue + event, run probe; next_wakeup",
        reference="bare psycopg: every job's cursor (the project's statement) and due ticks (its cron code), "
        "then per job and tick one transaction of the claim INSERT + its event and a queue row",
    )
    rep.add(*curve_rows("all passes", "jobs", points))
    for p in points:
        rep.add(
            Row(f"claims per second, {p.size:,} jobs", "/s", p.units / p.project, p.units / p.reference, "higher"),
            Row(f"ticks claimed once, each with its task, {p.size:,} jobs", "runs", p.extra["claimed"], p.units,
                None, f"{p.units:,}, tasks = enqueued runs",
                p.extra["claimed"] == p.units and p.extra["tasks"] == p.extra["enqueued"]),
        )  # fmt: skip
    curve_report(
        rep,
        points,
        unit="jobs",
        xlabel="declared cron jobs",
        title=f"scheduler pass: {args.passes} passes",
        labels=("project (tick_pass)", "claim + event + queue row, raw SQL"),
        heading="per size (unit: one tick claimed and enqueued)",
    )
    rep.note(f"pass time at {points[-1].size:,} jobs: {fmt(points[-1].project / args.passes * 1000)} ms")
    rep.note("each size in a database of its own; a first, untimed pass registers the jobs")
    rep.note(
        "the reference learns where each job stands as a pass must: one read of every job's cursor "
        "(scheduling.queries.SCHEDULE_STATES), its due ticks from scheduling.cron; no tick is handed to it"
    )
    rep.note("measured on a shared 2-core machine (other work running): ratios hold better than absolute times")
    return rep


if __name__ == "__main__":
    raise SystemExit(main())
