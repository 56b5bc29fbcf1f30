"""Benchmark 4: tick lateness with idle workers.

Two ``manage.py worker`` processes (two identical servers: a django-q2 cluster and the
scheduler loop each) run on an accelerated clock (``TIFFIN_CLOCK_START``,
``TIFFIN_CLOCK_ANCHOR``, ``TIFFIN_CLOCK_SPEED``; see ``tiffin/clock.py``) with a test-only
every-minute job, ``bench-tick``, declared through ``SCHEDULER_EXTRA_JOB_MODULES``. The
app's own jobs are declared too, as in production; their tables are empty.

- project: lateness of a run = ``started_at - scheduled_for`` from job_runs, i.e. the
  instant a worker started the run (after the claim, the enqueue and django-q2's pickup)
  minus its logical time.
- reference, in the same run, on the same clock: a single-process cron loop, the best a
  lone server can do: compute the next instant with the same cron code, sleep until it,
  then call the handler in-process (no database claim, no queue). Its lateness is the
  sleep's overshoot. Beside it, a naive ``while True: work(); sleep(60)`` loop, whose
  lateness is drift that grows with every tick.

Lateness is measured on the simulated clock and divided by the speed, so every figure is
in real seconds. Goals: at least 100 ticks, every one started, p99 under 1 s.

    python -m bench.tick_lateness [--ticks 110] [--speed 120] [--workers 2]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from types import FrameType

import psycopg

from bench.common import (
    PYTHON,
    Report,
    Row,
    child_env,
    child_start,
    children,
    database_create,
    percentile,
    sql_run,
)
from scheduling import cron
from tiffin import clock
from tiffin.clock import SimulatedClock

NAME = "tick_lateness"
TICK_JOB = "bench-tick"
TICK_CRON = "* * * * *"
TICK = timedelta(minutes=1)
CLOCK_START = datetime(2027, 3, 1, tzinfo=UTC)
REFERENCE_TABLE = "bench_reference_ticks"


# --- The reference process (python -m bench.tick_lateness --reference-loop URL) --------


def reference_loops(url: str) -> None:
    """Run the cron loop and the naive interval loop until SIGTERM."""
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    loops = [threading.Thread(target=loop, args=(url, stop)) for loop in (_cron_loop, _interval_loop)]
    for thread in loops:
        thread.start()
    for thread in loops:
        thread.join()


def _cron_loop(url: str, stop: threading.Event) -> None:
    """Sleep to each computed instant, then 'run' (record when it started)."""
    with psycopg.connect(url, autocommit=True) as conn:
        last = clock.now()
        while not stop.is_set():
            due = cron.next_ticks(TICK_CRON, "UTC", max(clock.now(), last), 1)[0]
            if stop.wait(clock.real_seconds((due - clock.now()).total_seconds())):
                return
            _record(conn, "cron-loop", due, clock.now())
            last = due


def _interval_loop(url: str, stop: threading.Event) -> None:
    """The naive loop: run, then sleep one interval; its k-th run was meant for first + k minutes."""
    with psycopg.connect(url, autocommit=True) as conn:
        first = cron.next_ticks(TICK_CRON, "UTC", clock.now(), 1)[0]
        if stop.wait(clock.real_seconds((first - clock.now()).total_seconds())):
            return
        intended = first
        while True:
            _record(conn, "interval-loop", intended, clock.now())
            intended += TICK
            if stop.wait(clock.real_seconds(TICK.total_seconds())):
                return


def _record(conn: psycopg.Connection[tuple[object, ...]], kind: str, scheduled_for: datetime, at: datetime) -> None:
    conn.execute(
        f"INSERT INTO {REFERENCE_TABLE} (kind, scheduled_for, started_at) VALUES (%s, %s, %s)",
        (kind, scheduled_for, at),
    )


# --- The benchmark ------------------------------------------------------------------------


def lateness(url: str, query: str, params: tuple[object, ...], speed: float) -> list[float]:
    """Real seconds late of each row of (scheduled_for, started_at) the query returns."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(query, params).fetchall()
    return [(started - scheduled).total_seconds() / speed for scheduled, started in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=110, help="ticks in the measured window (at least 100)")
    parser.add_argument("--speed", type=float, default=120.0, help="simulated seconds per real second")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reference-loop", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_loop:
        reference_loops(args.reference_loop)
        return 0
    url = database_create("ticks")
    sql_run(url, f"CREATE TABLE {REFERENCE_TABLE} (kind text, scheduled_for timestamptz, started_at timestamptz)")
    sim = SimulatedClock(start=CLOCK_START, anchor=time.time() + 1.0, speed=args.speed, skew=0.0)
    env = child_env(
        url,
        TIFFIN_CLOCK_START=sim.start.isoformat(),
        TIFFIN_CLOCK_ANCHOR=repr(sim.anchor),
        TIFFIN_CLOCK_SPEED=repr(sim.speed),
        SCHEDULER_EXTRA_JOB_MODULES="bench.tick_jobs",
    )
    with children(NAME) as (started, logs):
        for n in range(args.workers):
            started.append(child_start(f"worker{n}", [PYTHON, "manage.py", "worker"], env=env, logs=logs))
        reference = [PYTHON, "-m", "bench.tick_lateness", "--reference-loop", url]
        started.append(child_start("reference", reference, env=env, logs=logs))
        window = _measure_window(url, sim, args)
    return _report(url, args, window).finish()


def _measure_window(url: str, sim: SimulatedClock, args: argparse.Namespace) -> list[datetime]:
    """Wait until every worker is up, then for ``ticks`` ticks; return the window's ticks."""
    deadline = time.monotonic() + 120
    while _count(url, "SELECT count(*) FROM job_scheduler_nodes") < args.workers or not _count(
        url, "SELECT count(*) FROM job_runs WHERE job_name = %s AND status = 'succeeded'", (TICK_JOB,)
    ):
        if time.monotonic() > deadline:
            sys.exit("the workers did not start within 120 s; see their logs")
        time.sleep(0.2)
    first = cron.next_ticks(TICK_CRON, "UTC", sim.now() + TICK, 1)[0]
    window = [first + i * TICK for i in range(args.ticks)]
    # Until the last tick plus a second of real time, so a late last run is still counted.
    time.sleep(sim.real_seconds((window[-1] - sim.now()).total_seconds()) + 1.0)
    return window


def _count(url: str, query: str, params: tuple[object, ...] = ()) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return int(row[0]) if row else 0


def _report(url: str, args: argparse.Namespace, window: list[datetime]) -> Report:
    bounds = (window[0], window[-1])
    project = lateness(
        url,
        "SELECT scheduled_for, started_at FROM job_runs WHERE job_name = %s AND started_at IS NOT NULL "
        "AND scheduled_for BETWEEN %s AND %s ORDER BY scheduled_for",
        (TICK_JOB, *bounds),
        args.speed,
    )
    by_kind = {
        kind: lateness(
            url,
            f"SELECT scheduled_for, started_at FROM {REFERENCE_TABLE} "
            "WHERE kind = %s AND scheduled_for BETWEEN %s AND %s ORDER BY scheduled_for",
            (kind, *bounds),
            args.speed,
        )
        for kind in ("cron-loop", "interval-loop")
    }
    ref, naive = by_kind["cron-loop"], by_kind["interval-loop"]
    rep = Report(
        name=NAME,
        title=f"4. tick lateness: {len(window)} accelerated ticks, {args.workers} idle workers",
        command="python -m bench.tick_lateness",
        project=f"{args.workers} x manage.py worker (scheduler loop + django-q2 cluster), every-minute job",
        reference="one process: sleep to the next cron instant, call the handler in-process (no claim, no queue)",
    )
    p99 = percentile(project, 99)
    rep.add(
        Row("ticks in window, runs started", "ticks", len(project), len(ref), None, ">= 100, all started",
            len(window) >= 100 and len(project) == len(window)),
        Row("lateness p50", "s", percentile(project, 50), percentile(ref, 50)),
        Row("lateness p99", "s", p99, percentile(ref, 99), goal="< 1 s", passed=p99 < 1.0),
        Row("lateness max", "s", max(project, default=float("nan")), max(ref, default=float("nan"))),
        Row("lateness max, vs naive sleep(60) loop", "s", max(project, default=float("nan")),
            max(naive, default=float("nan"))),
    )  # fmt: skip
    rep.note(f"clock speed {args.speed:g}x: one simulated minute every {60 / args.speed:g} real seconds")
    rep.note("lateness = (started_at - scheduled_for) on the simulated clock / speed: real seconds")
    rep.note(f"the naive loop drifts: {_drift(naive)} per tick, so its lateness only grows (a day has 1,440 ticks)")
    return rep


def _drift(naive: list[float]) -> str:
    if len(naive) < 2:
        return "-"
    return f"{(naive[-1] - naive[0]) / (len(naive) - 1) * 1000:.2f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
