"""Where the delayed-run path spends its time: the project's three steps, in this process.

    python -m bench.profile_delayed [--orders 2000] [--top 25]

1. place ``--orders`` orders with ``order_place`` (each with its delayed run), placed
   20 s in the past so their deadlines have passed by the database's clock;
2. one scheduler pass (``tick_pass``) and whatever more passes it asks for, which take
   the due runs and enqueue their tasks;
3. execute every enqueued run as the worker's task does (``runs_execute``, in batches of
   the job's ``batch_size``), without django-q2's own hand-over.

Each step runs under cProfile; it prints the step's wall and CPU time per 1,000 orders,
the CPU of this connection's PostgreSQL backend (read from /proc when the server runs on
this machine), the SQL statements per order (counted with Django's ``execute_wrapper``) and the
functions with the most cumulative time. It measures a fresh database of its own
(``<prefix>profile_delayed``) with DEBUG off.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.common import database_create, django_setup, sql_run


def measured(name: str, orders: int, top: int, work: Callable[[], object]) -> None:
    """Run ``work`` under cProfile and count its statements; print what it cost."""
    from django.db import connection

    statements: Counter[str] = Counter()

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements[sql.split(None, 1)[0].upper()] += 1
        return execute(sql, params, many, context)

    profile = cProfile.Profile(time.process_time)
    server = _backend_cpu()
    wall, cpu = time.perf_counter(), time.process_time()
    with connection.execute_wrapper(count):
        profile.runcall(work)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    server = _backend_cpu() - server
    per_order = {kind: round(n / orders, 3) for kind, n in statements.most_common()}
    print(f"\n== {name}: {wall / orders * 1000:.3f} s wall, {cpu / orders * 1000:.3f} s CPU per 1,000 orders")
    if not math.isnan(server):
        print(f"PostgreSQL (this connection's backend): {server / orders * 1000:.3f} s CPU per 1,000 orders")
    print(f"statements per order: {sum(statements.values()) / orders:.2f} {per_order}")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:8000])


def _backend_cpu() -> float:
    """CPU seconds used so far by this connection's PostgreSQL backend, from /proc (NaN
    when the server is not on this machine): unlike the client's, not inflated by cProfile."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.orders < 1:
        parser.error("--orders must be at least 1")
    url = database_create("profile_delayed")
    sql_run(
        url,
        "INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
        "SELECT 'Bench restaurant ' || i, 'Asia/Kolkata', 0.15, now() - interval '1 hour', true"
        " FROM generate_series(1, 100) AS i",
    )
    django_setup(url, ORDER_ACCEPT_TIMEOUT_SECONDS="10")
    from orders.models import Restaurant
    from orders.services import order_place
    from scheduling.dispatch import tick_pass
    from scheduling.execution import runs_execute
    from scheduling.models import JobRun, RunStatus
    from scheduling.registry import registry
    from tiffin import clock

    restaurants = list(Restaurant.objects.order_by("id"))
    placed_at = clock.now() - timedelta(seconds=20)

    def place() -> None:
        for n in range(args.orders):
            order_place(restaurant=restaurants[n % 100], customer_ref=f"p-{n}", total=Decimal("12.50"), now=placed_at)

    def dispatch() -> None:
        while tick_pass(now=clock.now()).more_due:
            pass

    def execute() -> None:
        ids = list(JobRun.objects.filter(status=RunStatus.ENQUEUED).order_by("id").values_list("id", flat=True))
        size = registry.get("cancel-stale-order").batch_size
        for start in range(0, len(ids), size):
            runs_execute(run_ids=ids[start : start + size], worker="profile")

    measured("place (order_place)", args.orders, args.top, place)
    measured("dispatch (tick_pass)", args.orders, args.top, dispatch)
    measured("execute (runs_execute)", args.orders, args.top, execute)
    left = JobRun.objects.exclude(status=RunStatus.SUCCEEDED).count()
    print(f"\nruns not succeeded at the end: {left}")
    return 0 if left == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
