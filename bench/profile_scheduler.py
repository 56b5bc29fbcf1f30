"""Where the scheduler pass spends its time: ``tick_pass`` over generated cron jobs.

    python -m bench.profile_scheduler [--jobs 500] [--passes 5] [--top 25]

The jobs of bench/scheduler_pass.py (``bench/cron_jobs.py``, every minute each); after a
first pass registers them, ``--passes`` passes a simulated minute apart each claim one
tick per job. They run under cProfile with ``time.process_time`` as its timer (this
process's CPU, not the other work on a shared machine); it prints wall and CPU time per
claim, the SQL statements per pass by kind (counted with Django's ``execute_wrapper``)
and the functions with the most time. It measures a fresh database of its own
(``<prefix>profile_scheduler``, dropped afterwards) with DEBUG off.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from bench.common import database_create, database_drop, django_setup
from bench.scheduler_pass import T0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.jobs < 1 or args.passes < 1:
        parser.error("--jobs and --passes must be at least 1")
    url = database_create("profile_scheduler")
    try:
        django_setup(url, SCHEDULER_EXTRA_JOB_MODULES="bench.cron_jobs", BENCH_CRON_JOBS=str(args.jobs))
        return measure(args)
    finally:
        from django.db import connections

        connections.close_all()
        database_drop("profile_scheduler")


def measure(args: argparse.Namespace) -> int:
    from django.db import connection

    from scheduling.dispatch import tick_pass

    tick_pass(now=T0)
    statements: Counter[str] = Counter()

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements[sql.split(None, 1)[0].upper()] += 1
        return execute(sql, params, many, context)

    def passes() -> None:
        for minute in range(1, args.passes + 1):
            tick_pass(now=T0 + timedelta(minutes=minute))

    profile = cProfile.Profile(time.process_time)
    wall, cpu = time.perf_counter(), time.process_time()
    with connection.execute_wrapper(count):
        profile.runcall(passes)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    claims = args.jobs * args.passes
    per_pass = {kind: round(n / args.passes, 1) for kind, n in statements.most_common()}
    print(f"== {args.jobs} jobs, {args.passes} passes: {wall / claims * 1e6:.0f} us wall, "
          f"{cpu / claims * 1e6:.0f} us CPU per claim")  # fmt: skip
    print(f"statements per pass: {sum(statements.values()) / args.passes:.1f} {per_pass}")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    out.write("\n")
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.top)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
