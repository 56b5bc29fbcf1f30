"""What benchmark 3's worker costs per order, in CPU seconds rather than wall-clock ones.

    python -m bench.worker_cost [--orders 15000] [--rate 1500] [--extra-sql "DROP INDEX ..."]

1. place ``--orders`` orders with ``order_place`` (each with its delayed run), timing this
   process's CPU and its PostgreSQL backend's per order;
2. move their times so that their deadlines fall due ``--rate`` a second from a few
   seconds ahead, as benchmark 3's placers leave them (``--extra-sql`` runs after that:
   an experiment, such as an index dropped);
3. start one ``manage.py worker`` (scheduler loop and django-q2 cluster, as benchmark 3
   runs it) and wait until every run succeeded.

It prints the worker's CPU (its process and everything it forked) and its PostgreSQL
backends' CPU from the first deadline to the last run's success, per 1,000 orders, and
the cancellations' lateness. Benchmark 3's worker column also counts the worker's start
and its idle polling; this counts neither, and nothing else competes for its orders, so
the figure moves little with other load on the machine (unlike benchmark 3's ceilings).
Its own database: ``<prefix>worker_cost``.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.common import PYTHON, child_env, child_start, children, database_create, django_setup, sql_run

NAME = "worker_cost"
TIMEOUT_SECONDS = 10
# Seconds from the end of step 2 to the first deadline: the worker's start takes a few.
LEAD_SECONDS = 12.0
TICKS = os.sysconf("SC_CLK_TCK")


def backends_cpu(database: str) -> float:
    """CPU seconds so far of every PostgreSQL backend connected to ``database`` (from
    /proc: the server runs on this machine in every setup the benchmarks know)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if command.startswith(b"postgres: ") and f" {database} ".encode() in command:
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def tasks_saved(count: int, *, batch: int) -> None:
    """``count`` successful tasks in django-q2's result table, as a worker leaves them after
    ``count`` batches of ``batch`` cancellations: benchmark 3 reaches the save limit
    (``Q_SAVE_LIMIT``) within its first steps."""
    from django.utils import timezone
    from django_q.models import Task

    from scheduling.queue import EXECUTE_TASK

    now = timezone.now()
    Task.objects.bulk_create(
        Task(id=f"{n:032x}", name=f"cancel-stale-order:{n * batch}", func=EXECUTE_TASK,
             args=(list(range(n * batch, (n + 1) * batch)),), kwargs={}, result=batch,
             group="cancel-stale-order", started=now, stopped=now, success=True)
        for n in range(count)
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=15000)
    parser.add_argument("--rate", type=float, default=1500.0, help="deadlines per second")
    parser.add_argument(
        "--saved-tasks",
        type=int,
        default=None,
        help="successful django-q2 tasks already saved (default: the save limit in effect, as in benchmark 3)",
    )
    parser.add_argument("--extra-sql", default="", help="a statement run before the worker starts")
    args = parser.parse_args()
    if args.orders < 1 or args.rate <= 0 or (args.saved_tasks or 0) < 0:
        parser.error("--orders and --rate must be positive, --saved-tasks not negative")
    url = database_create(NAME)
    database = url.rsplit("/", 1)[1]
    sql_run(
        url,
        "INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
        "SELECT 'Bench restaurant ' || i, 'Asia/Kolkata', 0.15, now() - interval '1 hour', true"
        " FROM generate_series(1, 100) AS i",
    )
    django_setup(url, ORDER_ACCEPT_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS))
    from django.db import connection
    from django_q.conf import Conf

    from orders.models import CANCEL_STALE_ORDER_JOB, Order, OrderStatus, Restaurant
    from orders.services import order_place
    from scheduling.models import JobRun, RunStatus
    from scheduling.registry import registry
    from tiffin import clock

    restaurants = list(Restaurant.objects.order_by("id"))
    # Placed a day ahead (no deadline passes while placing), then moved back.
    start = clock.now() + timedelta(days=1)
    server, cpu = backends_cpu(database), time.process_time()
    for n in range(args.orders):
        placed_at = start + timedelta(seconds=n / args.rate)
        order_place(restaurant=restaurants[n % 100], customer_ref=f"w-{n}", total=Decimal("12.50"), now=placed_at)
    cpu, server = time.process_time() - cpu, backends_cpu(database) - server
    saved = int(Conf.SAVE_LIMIT) if args.saved_tasks is None else args.saved_tasks
    tasks_saved(max(saved, 0), batch=registry.get(CANCEL_STALE_ORDER_JOB).batch_size)
    print(
        f"placing: {cpu / args.orders * 1000:.3f} s CPU per 1,000 orders, its backend {server / args.orders * 1000:.3f}"
    )
    with connection.cursor() as cursor:
        shift: Any = start - (clock.now() + timedelta(seconds=LEAD_SECONDS - TIMEOUT_SECONDS))
        cursor.execute("UPDATE orders_order SET placed_at = placed_at - %s", [shift])
        cursor.execute(
            "UPDATE job_runs SET due_at = due_at - %s, scheduled_for = scheduled_for - %s,"
            " created_at = created_at - %s",
            [shift] * 3,
        )
        cursor.execute("UPDATE job_run_events SET at = at - %s", [shift])
        if args.extra_sql:
            cursor.execute(args.extra_sql)
        cursor.execute("VACUUM ANALYZE")
    first_due = start - shift + timedelta(seconds=TIMEOUT_SECONDS)
    last_due = first_due + timedelta(seconds=args.orders / args.rate)
    connection.close()
    with children(NAME) as (started, logs):
        env = child_env(url, ORDER_ACCEPT_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS), DATABASE_CONN_MAX_AGE="60")
        worker = child_start("worker", [PYTHON, "manage.py", "worker"], env=env, logs=logs)
        started.append(worker)
        time.sleep(max((first_due - clock.now()).total_seconds() - 0.3, 0.0))
        cpu, server = worker.cpu_seconds(), backends_cpu(database)
        while JobRun.objects.exclude(status=RunStatus.SUCCEEDED).exists():
            if clock.now() > last_due + timedelta(seconds=60):
                print(f"the worker did not finish within 60 s of the last deadline:\n{worker.tail()}")
                return 1
            time.sleep(0.5)
        cpu, server = worker.cpu_seconds() - cpu, backends_cpu(database) - server
    late = sorted(
        (at - placed - timedelta(seconds=TIMEOUT_SECONDS)).total_seconds()
        for placed, at in Order.objects.filter(status=OrderStatus.CANCELLED).values_list("placed_at", "cancelled_at")
        if at is not None
    )
    print(
        f"worker: {cpu / args.orders * 1000:.3f} s CPU per 1,000 orders, its backends "
        f"{server / args.orders * 1000:.3f}; lateness p50 {late[len(late) // 2]:.3f} s, "
        f"p99 {late[int(len(late) * 0.99)]:.3f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
