"""Benchmark 5: claim contention.

Eight processes race to claim the same 5,000 cron ticks, all in the same order (as eight
schedulers waking for the same minute would).

- project: each attempt is the claim of one tick in a transaction of its own
  (``scheduling.dispatch.runs_claim``, as a pass with one due tick makes it), i.e.
  ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` into job_runs, and for the winner the
  read-back, the django-q2 enqueue (a row in the ORM broker) and the ``claimed`` event.
- reference: the same race with bare psycopg: ``INSERT ... ON CONFLICT DO NOTHING
  RETURNING id`` in autocommit into ``bench_claims``, a copy of job_runs with the same
  columns, unique key and indexes (``LIKE job_runs INCLUDING ALL``). No enqueue, no event.

Each runs once by default (``--rounds N`` alternates N rounds and keeps the faster of each). Goal: exactly
5,000 runs and 5,000 tasks, every round.

    python -m bench.claim_contention [--processes 8] [--ticks 5000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Event
from typing import Any

import psycopg

from bench.common import Report, Row, database_create, django_setup, sql_run, sql_value, tables_truncate

NAME = "claim_contention"
JOB = "bench-claim"
T0 = datetime(2027, 3, 1, tzinfo=UTC)
REFERENCE_TABLE = "bench_claims"
REFERENCE_INSERT = (
    "INSERT INTO bench_claims (job_name, subject, scheduled_for, due_at, status, trigger, created_at, "
    "enqueued_at, finished_at, skip_reason, attempts, worker, error) "
    "VALUES (%s, '', %s, %s, 'enqueued', 'cron', %s, %s, NULL, '', 0, '', '') "
    "ON CONFLICT (job_name, subject, scheduled_for) DO NOTHING RETURNING id"
)


def tick(i: int) -> datetime:
    return T0 + timedelta(minutes=i)


def _race_project(url: str, ticks: int, ready: Any, go: Event, results: Any) -> None:
    django_setup(url)
    from django.db import connection, transaction

    from scheduling.dispatch import runs_claim
    from scheduling.models import JobKind, RunStatus, Trigger
    from scheduling.policies import PlannedTick
    from scheduling.registry import Job

    job = Job(name=JOB, handler=lambda ctx: None, kind=JobKind.CRON, cron="* * * * *")
    now = tick(ticks)
    connection.ensure_connection()
    ready.put(True)
    go.wait()
    won = 0
    for i in range(ticks):
        # Exactly the transaction a scheduler pass opens for one job's due ticks.
        with transaction.atomic():
            won += len(
                runs_claim(job=job, plan=[PlannedTick(tick(i), RunStatus.ENQUEUED)], trigger=Trigger.CRON, now=now)
            )
    results.put(won)


def _race_reference(url: str, ticks: int, ready: Any, go: Event, results: Any) -> None:
    now = tick(ticks)
    with psycopg.connect(url, autocommit=True) as conn:
        ready.put(True)
        go.wait()
        won = 0
        for i in range(ticks):
            won += len(conn.execute(REFERENCE_INSERT, (JOB, tick(i), tick(i), now, now)).fetchall())
    results.put(won)


def race(mode: str, url: str, *, processes: int, ticks: int) -> tuple[float, int]:
    """Start ``processes`` racers, release them together; return (wall seconds, claims won)."""
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    target = _race_project if mode == "project" else _race_reference
    racers = [ctx.Process(target=target, args=(url, ticks, ready, go, results)) for _ in range(processes)]
    for racer in racers:
        racer.start()
    for _ in racers:
        ready.get(timeout=120)
    started = time.perf_counter()
    go.set()
    won = sum(results.get(timeout=600) for _ in racers)
    elapsed = time.perf_counter() - started
    for racer in racers:
        racer.join()
        if racer.exitcode != 0:
            raise RuntimeError(f"a {mode} racer exited with {racer.exitcode}")
    return elapsed, won


def reset(url: str) -> None:
    tables_truncate(url, f"job_run_events, job_runs, django_q_ormq, {REFERENCE_TABLE} CASCADE")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    url = database_create("claims")
    sql_run(url, f"CREATE TABLE {REFERENCE_TABLE} (LIKE job_runs INCLUDING ALL)")
    best: dict[str, float] = {}
    counts: dict[str, list[int]] = {"project runs": [], "project tasks": [], "reference rows": [], "won": []}
    for _ in range(args.rounds):
        for mode in ("reference", "project"):
            reset(url)
            elapsed, won = race(mode, url, processes=args.processes, ticks=args.ticks)
            best[mode] = min(best.get(mode, elapsed), elapsed)
            if mode == "project":
                counts["project runs"].append(sql_value(url, "SELECT count(*) FROM job_runs"))
                counts["project tasks"].append(sql_value(url, "SELECT count(*) FROM django_q_ormq"))
                counts["won"].append(won)
            else:
                counts["reference rows"].append(sql_value(url, f"SELECT count(*) FROM {REFERENCE_TABLE}"))
    return report(args, best, counts).finish()


def report(args: argparse.Namespace, best: dict[str, float], counts: dict[str, list[int]]) -> Report:
    attempts = args.processes * args.ticks
    rep = Report(
        name=NAME,
        title=f"5. claim contention: {args.processes} processes race for the same {args.ticks:,} ticks",
        command="python -m bench.claim_contention",
        project="runs_claim in a transaction per tick (INSERT ON CONFLICT RETURNING + enqueue + event), Django ORM",
        reference="bare psycopg INSERT ... ON CONFLICT DO NOTHING RETURNING id, autocommit, same table shape",
    )
    exact = args.ticks
    ref_rows, runs, tasks = counts["reference rows"], counts["project runs"], counts["project tasks"]
    rep.add(
        Row("wall time", "s", best["project"], best["reference"]),
        Row("claim attempts per second", "/s", attempts / best["project"], attempts / best["reference"], "higher"),
        Row("ticks claimed per second", "/s", args.ticks / best["project"], args.ticks / best["reference"], "higher"),
        Row(
            "runs (rows) per round",
            "rows",
            _same(runs),
            _same(ref_rows),
            None,
            f"exactly {exact:,}",
            all(n == exact for n in runs + ref_rows),
        ),
        Row(
            "tasks enqueued per round",
            "tasks",
            _same(tasks),
            None,
            None,
            f"exactly {exact:,}",
            all(n == exact for n in tasks),
        ),
        Row(
            "claims won per round",
            "claims",
            _same(counts["won"]),
            None,
            None,
            f"exactly {exact:,}",
            all(n == exact for n in counts["won"]),
        ),
    )
    if args.rounds > 1:
        rep.note(f"{args.rounds} rounds each, alternating reference and project; wall time is the faster round")
    rep.note(f"each round: {args.processes} processes x {args.ticks:,} attempts = {attempts:,} attempts")
    return rep


def _same(values: list[int]) -> int | str:
    """One number when every round agrees, else all of them (a goal will have failed)."""
    return values[0] if len(set(values)) == 1 else "/".join(str(v) for v in values)


if __name__ == "__main__":
    raise SystemExit(main())
