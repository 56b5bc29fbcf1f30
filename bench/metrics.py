"""A scrape of /metrics on a long history, beside the same scrape on an empty one.

The same scrape is timed three times in one database, on a frozen clock (bench.history's
``NOW``), through Django's test Client:

1. **empty**: no job runs at all;
2. **day one**: the newest day of runs at the density of the full history (the check
   window, 24 h, then holds the same runs as in 3);
3. **long history**: the ``--days - 1`` days before it added: by default 1,000,000
   delayed runs and every cron tick of 30 days (bench.history's generator, runs only).

It prints each phase's median scrape time beside ``/healthz`` (two small queries: the
machine's floor for a request, measured in the same phase), the ratios (long history against day one is
the cost of the history alone; against empty, of everything), and on the long history
the scrape's slowest queries with their plans' first lines. It asserts nothing: the
figures are what this machine did in this run.

    BENCH_DATABASE_PREFIX=tiffin_bench_ python -m bench.metrics [--runs 1000000] [--days 30] [--repeat 7] [--keep]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import bulk_load, database_create, database_drop, django_setup, sql_value
from bench.history import NOW, PAYOUT_TICKS_FIX, RUNS_INSERT, Span, fixtures_create, schedules_registered_long_ago
from bench.history import _bench_env as frozen_clock
from bench.history import _test_settings as test_client_settings
from bench.history import spans as history_spans

NAME = "metrics"


def request_time(path: str, repeat: int) -> tuple[float, float]:
    """The median wall seconds of ``repeat`` GETs of ``path`` (after one warm-up), and
    this process's CPU seconds per GET (the database server's are not in it). On a busy
    machine the wall time is mostly waiting for a core; the CPU time is not."""
    from django.test import Client

    client = Client()
    assert client.get(path).status_code == 200
    times = []
    cpu = time.process_time()
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.content[:200]
    return statistics.median(times), (time.process_time() - cpu) / repeat


def phase_times(repeat: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(/metrics, /healthz): the scrape beside a two-query probe, measured together."""
    return request_time("/metrics", repeat), request_time("/healthz", repeat)


def slowest_queries(count: int = 4) -> list[tuple[float, str, str]]:
    """The scrape's slowest queries: (seconds, SQL, first line of EXPLAIN ANALYZE)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as scrape:
        Client().get("/metrics")
    ranked = sorted(scrape.captured_queries, key=lambda q: float(q["time"]), reverse=True)[:count]
    found = []
    with connection.cursor() as cursor:
        for query in ranked:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query['sql']}")
            plan = [row[0] for row in cursor.fetchall()]
            scan = next((line.strip() for line in plan if "Scan" in line), plan[0])
            found.append((float(query["time"]), query["sql"], scan))
    return found


def runs_load(url: str, span: Span) -> float:
    return bulk_load(url, "job_runs", [(RUNS_INSERT, span.params), (PAYOUT_TICKS_FIX, [])])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000, help="delayed runs in the long history")
    parser.add_argument("--days", type=int, default=30, help="days the long history spans")
    parser.add_argument("--repeat", type=int, default=7, help="timed scrapes per phase (the median is kept)")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    if args.runs < args.days or args.days < 2:
        parser.error("--days must be at least 2 and --runs at least --days")
    url = database_create(NAME)
    django_setup(url, **frozen_clock(), METRICS_ENABLED="1")
    test_client_settings()
    fixtures_create(url)
    newest, older = history_spans(args.runs, args.days)
    times = {"empty": phase_times(args.repeat)}
    runs_load(url, newest)
    schedules_registered_long_ago()
    times["day one"] = phase_times(args.repeat)
    runs_load(url, older)
    times["long history"] = phase_times(args.repeat)
    total: Any = sql_value(url, "SELECT count(*) FROM job_runs")
    print(f"median wall time of {args.repeat} requests, and this process's CPU per request (clock at {NOW:%H:%M}):")
    print(f"  {'phase':<13} {'/metrics wall':>14} {'cpu':>9} {'/healthz wall':>14} {'cpu':>9}")
    for phase, ((scrape, scrape_cpu), (probe, probe_cpu)) in times.items():
        print(
            f"  {phase:<13} {scrape * 1000:11.1f} ms {scrape_cpu * 1000:6.1f} ms"
            f" {probe * 1000:11.1f} ms {probe_cpu * 1000:6.1f} ms"
        )
    print(f"  job_runs in the long history: {total:,} over {args.days} days")
    for i, what in enumerate(("wall", "cpu")):
        long, day, empty = (times[phase][0][i] for phase in ("long history", "day one", "empty"))
        print(f"  /metrics {what:<4}: long history / day one {long / day:.2f} x, / empty {long / empty:.2f} x")
    print("slowest queries of one scrape on the long history:")
    for seconds, query, scan in slowest_queries():
        print(f"  {seconds * 1000:7.1f} ms  {scan}\n             {query[:150]}")
    if not args.keep:
        from django.db import connections

        connections.close_all()
        database_drop(NAME)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
