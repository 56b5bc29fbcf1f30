"""Benchmark 6: every everyday path on a long history.

The same paths are timed on three databases, on a frozen clock (``NOW``), each a copy
of the one before with more added:

1. **empty**: no job runs, orders, carts or payouts at all;
2. **the first two weeks**: the newest ``REFERENCE_DAYS`` (15) days of traffic, at the
   density of the full run: every cron tick claimed, the delayed order cancellations with
   three events each, their orders, a week of carts, the payouts of each Sunday tick;
3. **long history**: the days before them added, the same density: by default
   10,000,000 finished runs and 30,000,000 events over 60 days, 10,000,000 orders.

The goal compares 3 with 2. Fifteen days is the longest window any path reads: the
dashboard draws seven days of ticks, and the ledger check in ``check_runs`` re-sums the
orders of the payouts written in its window, whose business weeks (the Sunday tick pays
London's and New York's week ending the Monday before) reach back fourteen and a half
days from ``NOW``. On a shorter reference those paths would read fewer rows than on the
long history (an earlier version compared with one day: ``check_runs`` summed a day of
orders against a week, the dashboard drew one day of bars against seven), and the ratio
would price the work of a week, not the length of the history. With both holding the
same windows full, their ratio is the cost of the history alone. The empty column is
printed beside them for reference: a page with no rows renders less, and that difference
says nothing about the table's size.

Paths: the tick pass, ``runs_check`` (what ``check_runs`` runs), ``/healthz``, the admin
job runs list (unfiltered, by job, by status, by day), one run's page with its events,
the schedules dashboard, and the payouts, orders and carts lists, through Django's test
Client logged in as a superuser. The three are timed interleaved, path by path: each
round calls the path once on each database (in an order that rotates), each call after a
warm-up call on the same database, and the median of ``--repeat`` rounds is reported. So
a burst of load on a shared machine falls on the three alike, and the ratio holds where
phases timed minutes apart (as an earlier version did) would compare two different
machines.

The data is generated with set-based SQL (``generate_series``, ``INSERT ... SELECT``),
indexes rebuilt and the tables analysed (``bench.common.bulk_load``).

Then the prune of that history (``prune_measure``): ``history_prune`` with retention
shortened so most of the 60 days is prunable, for at most ``--prune-seconds`` (the whole
backlog takes far longer; the rate is steady), while another process claims and places
orders: rows per second beside benchmark 3's insert rate, each batch's transaction, and
the claims' and ``order_place``'s p99 beside the same load without the prune.

    python -m bench.history [--runs 10000000] [--days 60] [--repeat 5] [--prune-seconds 120] [--keep]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import (
    DATABASE_PREFIX,
    Report,
    Row,
    Stopwatch,
    bulk_load,
    database_clone,
    database_create,
    database_drop,
    database_url,
    django_setup,
    percentile,
    sql_value,
)

NAME = "history"
# A Monday noon: the day before it holds a Sunday payout tick (20:30 UTC), every job's ticks.
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RESTAURANTS = 1000
ZONES = ("Asia/Kolkata", "Europe/London", "America/New_York")
# One delayed run in this many is dead, one cron tick of cancel-stale-orders in
# SKIP_EVERY skipped (overlap): both are what the check and the status filter find.
DEAD_EVERY, SKIP_EVERY = 1000, 100
GOAL = 1.5
REFERENCE = "first two weeks"
REFERENCE_DAYS = 15
PHASES = ("empty", REFERENCE, "long history")
CART_DAYS = 7
RUN_PAGE = "one run's page (events inline)"


# --- The data ---------------------------------------------------------------------------------

# Every cron tick of every declared cron job in (lo, hi], and the delayed runs with ids
# first..last spread evenly over the same span; in time order, so ids follow time as in
# production. Columns follow the INSERT below.
RUNS_INSERT = f"""
INSERT INTO job_runs (job_name, subject, scheduled_for, due_at, status, trigger, attempts, fence,
                      created_at, enqueued_at, started_at, heartbeat_at, finished_at, worker,
                      skip_reason, error, result)
SELECT job_name, subject, t, t, status, trigger, CASE WHEN status = 'skipped' THEN 0 ELSE 1 END,
       CASE WHEN status = 'skipped' THEN NULL ELSE fence END, t - created_before,
       t + interval '0.2 s', CASE WHEN status = 'skipped' THEN NULL ELSE t + interval '0.5 s' END,
       NULL, t + interval '0.8 s', CASE WHEN status = 'skipped' THEN '' ELSE 'bench-worker:1' END,
       CASE WHEN status = 'skipped' THEN 'overlap' ELSE '' END,
       CASE WHEN status = 'dead' THEN E'Traceback ...\\nRuntimeError: bench' ELSE '' END, NULL
FROM (
    SELECT 'cancel-stale-order' AS job_name, 'order:' || i AS subject,
           %(lo)s::timestamptz + (i - %(first)s + 0.5) * (%(hi)s::timestamptz - %(lo)s) / %(count)s AS t,
           CASE WHEN i %% {DEAD_EVERY} = 7 THEN 'dead' ELSE 'succeeded' END AS status, 'delayed' AS trigger,
           i AS fence, interval '10 minutes' AS created_before
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
    UNION ALL
    SELECT job_name, '', t, CASE WHEN job_name = 'cancel-stale-orders' AND n %% {SKIP_EVERY} = 3
                                 THEN 'skipped' ELSE 'succeeded' END,
           'cron', n, interval '0.1 s'
    FROM (
        SELECT job_name, t, row_number() OVER () AS n
        FROM (VALUES ('cancel-stale-orders', interval '5 minutes', interval '0'),
                     ('check-missed-runs', interval '1 hour', interval '0'),
                     ('prune-history', interval '1 hour', interval '15 minutes'),
                     ('clean-carts', interval '1 hour', interval '0'),
                     ('weekly-payouts', interval '1 hour', interval '0')) AS j(job_name, step, past),
             generate_series(date_trunc('hour', %(lo)s::timestamptz) + j.past, %(hi)s, j.step) AS t
        WHERE t > %(lo)s AND (j.job_name IN ('cancel-stale-orders', 'check-missed-runs', 'prune-history')
              OR (j.job_name = 'clean-carts' AND extract(hour FROM t AT TIME ZONE 'UTC') = 2)
              OR (j.job_name = 'weekly-payouts' AND extract(dow FROM t AT TIME ZONE 'UTC') = 0
                  AND extract(hour FROM t AT TIME ZONE 'UTC') = 20))
    ) AS ticks
) AS runs
ORDER BY t
"""
# weekly-payouts ticks at 20:30: the hourly series above lands on 20:00, moved here.
PAYOUT_TICKS_FIX = (
    "UPDATE job_runs SET scheduled_for = scheduled_for + interval '30 minutes', "
    "due_at = due_at + interval '30 minutes', created_at = created_at + interval '30 minutes', "
    "enqueued_at = enqueued_at + interval '30 minutes', started_at = started_at + interval '30 minutes', "
    "finished_at = finished_at + interval '30 minutes' "
    "WHERE job_name = 'weekly-payouts' AND extract(minute FROM scheduled_for) = 0"
)
# Three events a run (enqueued, started, its outcome), for the runs in (lo, hi].
EVENTS_INSERT = """
INSERT INTO job_run_events (run_id, at, kind, attempt, fence, worker, message)
SELECT r.id, r.scheduled_for + e.offset_s * interval '1 second', CASE WHEN e.n = 3 THEN r.status ELSE e.kind END,
       r.attempts, r.fence, r.worker, ''
FROM job_runs r CROSS JOIN (VALUES (1, 'enqueued', 0.2), (2, 'started', 0.5), (3, '', 0.8)) AS e(n, kind, offset_s)
WHERE r.scheduled_for > %(lo)s AND r.scheduled_for <= %(hi)s
"""
# An order per delayed run (same id), placed ten minutes before it: most delivered.
ORDERS_INSERT = f"""
INSERT INTO orders_order (id, restaurant_id, customer_ref, status, total, placed_at, accepted_at,
                          rejected_at, delivered_at, cancelled_at, cancel_reason)
SELECT i, 1 + i %% {RESTAURANTS}, 'customer-' || (i %% 50000), s, 10 + (i %% 40),
       t, CASE WHEN s IN ('accepted', 'delivered') THEN t + interval '2 minutes' END,
       CASE WHEN s = 'rejected' THEN t + interval '3 minutes' END,
       CASE WHEN s = 'delivered' THEN t + interval '40 minutes' END,
       CASE WHEN s = 'cancelled' THEN t + interval '10 minutes' END,
       CASE WHEN s = 'cancelled' THEN 'not accepted in time' ELSE '' END
FROM (
    SELECT i, %(lo)s::timestamptz + (i - %(first)s + 0.5) * (%(hi)s::timestamptz - %(lo)s) / %(count)s
              - interval '10 minutes' AS t,
           CASE WHEN i %% 20 = 0 THEN 'cancelled' WHEN i %% 20 = 1 THEN 'rejected' ELSE 'delivered' END AS s
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
) AS o
"""
ORDERS_SEQUENCE = "SELECT setval(pg_get_serial_sequence('orders_order', 'id'), (SELECT max(id) FROM orders_order))"
RESTAURANTS_INSERT = f"""
INSERT INTO orders_restaurant (id, name, timezone, commission_rate, onboarded_at, is_active)
SELECT i, 'Restaurant ' || i, (%(zones)s::text[])[1 + i %% 3], 0.15, %(onboarded)s, true
FROM generate_series(1, {RESTAURANTS}) AS i
"""
# The payouts each weekly-payouts run in (lo, hi] wrote: every restaurant's business weeks
# that ended (plus the 30-minute settlement delay) after the previous tick and by this one.
PAYOUTS_INSERT = """
INSERT INTO payouts_payout (restaurant_id, period_start, period_end, week_start_local, gross, commission,
                            net, order_count, commission_rate, tzdata_version, job_run_id, fence, created_at)
SELECT r.id, w.period_start, w.period_end, w.monday, s.gross, round(s.gross * r.commission_rate, 2),
       s.gross - round(s.gross * r.commission_rate, 2), s.n, r.commission_rate, 'bench',
       run.id, run.fence, run.finished_at
FROM job_runs run, orders_restaurant r,
     LATERAL (SELECT m::date AS monday, (m::date::timestamp AT TIME ZONE r.timezone) AS period_start,
                     ((m::date + 7)::timestamp AT TIME ZONE r.timezone) AS period_end
              FROM generate_series((run.scheduled_for AT TIME ZONE r.timezone)::date - 20,
                                   (run.scheduled_for AT TIME ZONE r.timezone)::date, interval '1 day') AS m
              WHERE extract(isodow FROM m) = 1) AS w,
     -- The amounts of the orders the week holds, so the ledger invariant holds.
     LATERAL (SELECT coalesce(sum(o.total), 0) AS gross, count(o.total) AS n FROM orders_order o
              WHERE o.restaurant_id = r.id AND o.status = 'delivered'
                AND o.delivered_at >= w.period_start AND o.delivered_at < w.period_end) AS s
WHERE run.job_name = 'weekly-payouts' AND run.scheduled_for > %(lo)s AND run.scheduled_for <= %(hi)s
  AND w.period_end + interval '30 minutes' <= run.scheduled_for
  AND w.period_end + interval '30 minutes' > run.scheduled_for - interval '7 days'
"""
# The carts of (lo, hi] (only the newest week survives the nightly clean-up), two items each.
CARTS_INSERT = """
INSERT INTO carts_cart (customer_ref, created_at, updated_at)
SELECT 'customer-' || i, t - interval '5 minutes', t
FROM (SELECT i, %(lo)s::timestamptz + (i + 0.5) * (%(hi)s::timestamptz - %(lo)s) / %(count)s AS t
      FROM generate_series(0, %(count)s - 1) AS i) AS c
"""
ITEMS_INSERT = """
INSERT INTO carts_cartitem (cart_id, sku, quantity, unit_price)
SELECT c.id, 'sku-' || k, 1 + k, 4.50 FROM carts_cart c CROSS JOIN generate_series(1, 2) AS k
WHERE c.updated_at > %(lo)s AND c.updated_at <= %(hi)s
"""


@dataclass(frozen=True)
class Span:
    """The delayed runs with ids first..last, spread over (lo, hi]."""

    lo: datetime
    hi: datetime
    first: int
    last: int

    @property
    def params(self) -> dict[str, Any]:
        return {
            "lo": self.lo,
            "hi": self.hi,
            "first": self.first,
            "last": self.last,
            "count": self.last - self.first + 1,
        }


def spans(runs: int, days: int) -> tuple[Span, Span]:
    """The newest REFERENCE_DAYS (the highest order ids) and the days before them."""
    newest_runs = runs * REFERENCE_DAYS // days
    start = NOW - timedelta(days=REFERENCE_DAYS)
    newest = Span(start, NOW, runs - newest_runs + 1, runs)
    older = Span(NOW - timedelta(days=days), start, 1, runs - newest_runs)
    return newest, older


def data_load(url: str, span: Span) -> dict[str, float]:
    """Add the span's runs, events, orders and payouts; return seconds per table."""
    p = span.params
    return {
        "job_runs": bulk_load(url, "job_runs", [(RUNS_INSERT, p), (PAYOUT_TICKS_FIX, [])]),
        "job_run_events": bulk_load(url, "job_run_events", [(EVENTS_INSERT, p)]),
        "orders_order": bulk_load(url, "orders_order", [(ORDERS_INSERT, p), (ORDERS_SEQUENCE, [])]),
        "payouts_payout": bulk_load(url, "payouts_payout", [(PAYOUTS_INSERT, p)]),
    }


def carts_load(url: str, per_day: int) -> dict[str, float]:
    """A week of carts: the nightly clean-up keeps no more, so the reference holds them all."""
    carts = {"lo": NOW - timedelta(days=CART_DAYS), "hi": NOW, "count": per_day * CART_DAYS}
    return {
        "carts_cart": bulk_load(url, "carts_cart", [(CARTS_INSERT, carts)]),
        "carts_cartitem": bulk_load(url, "carts_cartitem", [(ITEMS_INSERT, carts)]),
    }


def fixtures_create(url: str) -> None:
    """What every phase shares: restaurants, the schedules (registered long ago), a scheduler
    node that passed at NOW, a superuser."""
    bulk_load(
        url, "orders_restaurant", [(RESTAURANTS_INSERT, {"zones": list(ZONES), "onboarded": NOW - timedelta(days=400)})]
    )
    from django.contrib.auth import get_user_model

    from scheduling.models import Schedule, SchedulerNode
    from scheduling.schedules import schedules_register

    schedules_register(now=NOW)
    # Registered just after NOW: on the empty history no tick is expected yet (the tick
    # pass would otherwise claim the look-back's ticks and the history would not be empty).
    Schedule.objects.update(first_seen_at=NOW + timedelta(seconds=1))
    SchedulerNode.objects.create(name="bench:1", started_at=NOW - timedelta(days=1), last_pass_at=NOW, passes=1)
    get_user_model().objects.create_superuser("bench", "bench@example.com", "bench-password")


def schedules_registered_long_ago() -> None:
    from scheduling.models import Schedule

    Schedule.objects.update(first_seen_at=NOW - timedelta(days=365))


# --- The paths ----------------------------------------------------------------------------------


def paths() -> dict[str, Callable[[], Any]]:
    """Each everyday path as a callable that fails loudly if the page did not render."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from operations.monitoring import runs_check
    from scheduling.dispatch import tick_pass

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))

    def page(url: str, status: int = 200) -> Callable[[], Any]:
        def get() -> Any:
            response = client.get(url)
            if response.status_code != status:
                raise RuntimeError(f"GET {url}: {response.status_code}\n{response.content[:2000]!r}")
            return response

        return get

    day = NOW - timedelta(days=1)
    runs = "/admin/scheduling/jobrun/"
    newest_run = _newest_run_id()
    return {
        "tick pass": lambda: tick_pass(now=NOW),
        "check_runs (runs_check)": lambda: runs_check(now=NOW),
        "/healthz": page("/healthz"),
        "job runs list": page(runs),
        "job runs list, by job": page(f"{runs}?job_name=cancel-stale-order"),
        "job runs list, by status": page(f"{runs}?status__exact=succeeded"),
        "job runs list, by day": page(
            f"{runs}?scheduled_for__year={day.year}&scheduled_for__month={day.month}&scheduled_for__day={day.day}"
        ),
        RUN_PAGE: page(f"{runs}{newest_run}/change/"),
        "schedules dashboard": page("/admin/scheduling/schedule/dashboard/"),
        "payouts list": page("/admin/payouts/payout/"),
        "orders list": page("/admin/orders/order/"),
        "carts list": page("/admin/carts/cart/"),
    }


def _newest_run_id() -> int | None:
    """The newest order cancellation run (the one an operator would open first)."""
    from scheduling.models import JobRun

    return (
        JobRun.objects.filter(job_name="cancel-stale-order")
        .order_by("-scheduled_for", "-id")
        .values_list("id", flat=True)
        .first()
    )


def use_database(dbname: str) -> None:
    """Point Django's default connection at ``dbname`` (the next query reconnects)."""
    from django.db import connections

    connections.close_all()
    connections["default"].settings_dict["NAME"] = dbname


def paths_time(databases: dict[str, str], repeat: int) -> dict[str, dict[str, float]]:
    """Median seconds of each path on each of ``databases`` (phase -> database name),
    over ``repeat`` interleaved rounds; each timed call follows a warm-up call on the same
    database (the switch reconnects and the other databases' pages share the buffers)."""
    calls: dict[str, dict[str, Callable[[], Any]]] = {}
    for phase, dbname in databases.items():
        use_database(dbname)
        calls[phase] = paths()  # its own logged-in Client: the session lives in that database
        if not _newest_run_id():
            del calls[phase][RUN_PAGE]  # no run to show on an empty history
    phases = list(databases)
    samples: dict[str, dict[str, list[float]]] = {phase: {} for phase in phases}
    names = list(calls[phases[-1]])  # every path (the empty history has no run page)
    for name in names:
        for round_ in range(repeat):
            for phase in phases[round_ % len(phases) :] + phases[: round_ % len(phases)]:
                call = calls[phase].get(name)
                if call is None:
                    continue
                use_database(databases[phase])
                call()
                with Stopwatch() as watch:
                    call()
                samples[phase].setdefault(name, []).append(watch.seconds)
    return {
        phase: {
            name: statistics.median(samples[phase][name]) if name in samples[phase] else float("nan") for name in names
        }
        for phase in phases
    }


# --- The prune of that history ------------------------------------------------------------

# What the prune is compared with: benchmark 3 (bench.cancellations, BENCHMARKS.md) places
# 200 orders a second, and each order leaves one job_runs row (its cancel-stale-order run)
# and four job_run_events rows (claimed, enqueued, started, then succeeded), so the
# history grows by 200 runs and 1,000 rows a second. The prune must outpace it tenfold.
INSERT_ORDERS_PER_SECOND = 200
EVENTS_PER_ORDER = 4
PRUNE_GOAL_TIMES = 10
PRUNE_BATCH_P99_GOAL_MS = 100.0
# Retention for the measurement: finished runs after a week, dead ones after a month, so
# most of the 60 days is prunable (cron runs only before the claim guard horizon).
PRUNE_RUN_RETENTION_DAYS, PRUNE_DEAD_RETENTION_DAYS = 7, 30
# The load beside the prune: a claim and an order every LOAD_INTERVAL seconds each.
LOAD_INTERVAL = 0.05
LOAD_CLAIM_JOB = "check-missed-runs"


class _PruneTimeUp(Exception):
    """Raised from the prune's on_batch callback (after a commit) to end the sample."""


def load_worker(url: str, stop: Any, out: Any) -> None:
    """In another process: claims (``run_claim_manual``, the claim path of run_job and
    the admin) and orders (``order_place``) at a steady pace until ``stop`` is set; sends
    back (wall time, path, seconds) of every call."""
    django_setup(url, **_bench_env())
    from decimal import Decimal

    from orders.models import Restaurant
    from orders.services import order_place
    from scheduling.services import run_claim_manual

    restaurant = Restaurant.objects.get(pk=1)

    def claim(n: int) -> object:
        # A fresh instant each time, inside the horizon: every claim wins a new key.
        instant = NOW - timedelta(hours=1, milliseconds=n)
        return run_claim_manual(job_name=LOAD_CLAIM_JOB, scheduled_for=instant, now=NOW)

    def place(n: int) -> object:
        return order_place(restaurant=restaurant, customer_ref=f"bench-load-{n}", total=Decimal("12.50"), now=NOW)

    samples: list[tuple[float, str, float]] = []
    n = 0
    while not stop.is_set():
        n += 1
        for path, call in (("claim", claim), ("order_place", place)):
            started = time.perf_counter()
            if call(n) is None:
                raise RuntimeError(f"the load's {path} returned nothing")
            samples.append((time.time(), path, time.perf_counter() - started))
        time.sleep(LOAD_INTERVAL)
    out.send(samples)
    out.close()


def prune_measure(url: str, *, seconds: float, quiet: float) -> tuple[list[Row], list[str]]:
    """The prune of the long history with the real service (``history_prune``, the
    setting's batch size) for at most ``seconds``, while another process claims and
    places orders; the same load runs ``quiet`` seconds before and after it without the
    prune, for the reference p99s."""
    import multiprocessing

    from django.conf import settings
    from django.test.utils import override_settings

    from operations.retention import history_prune

    ctx = multiprocessing.get_context("spawn")
    stop, (receive, send) = ctx.Event(), ctx.Pipe(duplex=False)
    worker = ctx.Process(target=load_worker, args=(url, stop, send), daemon=True)
    retention = {
        "SCHEDULER_RUN_RETENTION_DAYS": PRUNE_RUN_RETENTION_DAYS,
        "SCHEDULER_DEAD_RUN_RETENTION_DAYS": PRUNE_DEAD_RETENTION_DAYS,
    }
    with override_settings(**retention):
        prunable = _prunable_count(url)
        worker.start()
        try:
            time.sleep(quiet / 2 + 5)  # its Django set-up first, outside the measurement
            prune = _prune_run(history_prune, settings.SCHEDULER_PRUNE_BATCH_SIZE, seconds)
            time.sleep(quiet / 2)
        finally:
            stop.set()
        samples = receive.recv() if receive.poll(60) else []
        worker.join(30)
    if not samples:
        raise RuntimeError("the load process sent no samples (see its traceback above)")
    return _prune_rows(prune, samples, prunable), _prune_notes(prune, prunable, seconds)


def _prunable_count(url: str) -> dict[str, int]:
    """The runs and events the measurement's retention allows to prune as of NOW (an
    upper bound: it ignores the cursor row and the payouts' runs, a few hundred)."""
    from scheduling.policies import claim_guard_horizon

    where = (
        "status IN ('succeeded', 'skipped', 'superseded', 'dead') AND finished_at < "
        "CASE WHEN status = 'dead' THEN %(dead)s::timestamptz ELSE %(finished)s::timestamptz END "
        "AND (trigger = 'delayed' OR scheduled_for < %(horizon)s)"
    )
    params = {
        "finished": NOW - timedelta(days=PRUNE_RUN_RETENTION_DAYS),
        "dead": NOW - timedelta(days=PRUNE_DEAD_RETENTION_DAYS),
        "horizon": claim_guard_horizon(now=NOW),
    }
    runs = sql_value(url, f"SELECT count(*) FROM job_runs WHERE {where}", params)
    return {"runs": int(runs)}


def _prune_run(history_prune: Callable[..., Any], batch_size: int, seconds: float) -> dict[str, Any]:
    """Prune until done or ``seconds`` have passed; the time between batch commits is each
    batch's transaction (pick, delete events, delete runs, commit) plus the loop's Python."""
    from django.conf import settings

    commits: list[float] = []
    resumed: list[float] = []
    totals: list[Any] = []
    started = time.perf_counter()
    deadline = started + seconds

    def on_batch(total: Any) -> None:
        # As the prune-history job does: rest after each batch (not part of the batch).
        commits.append(time.perf_counter())
        totals.append(total)
        if commits[-1] >= deadline:
            raise _PruneTimeUp
        time.sleep(settings.SCHEDULER_PRUNE_PAUSE_SECONDS)
        resumed.append(time.perf_counter())

    wall_start = time.time()
    try:
        history_prune(now=NOW, batch_size=batch_size, on_batch=on_batch)
        finished = True
    except _PruneTimeUp:
        finished = False
    elapsed = time.perf_counter() - started
    return {
        "elapsed": elapsed,
        "wall": (wall_start, wall_start + elapsed),
        "batches": [end - begin for begin, end in zip([started, *resumed], commits, strict=False)],
        "total": totals[-1] if totals else None,
        "finished": finished,
        "batch_size": batch_size,
    }


def _prune_rows(prune: dict[str, Any], samples: list[tuple[float, str, float]], prunable: dict[str, int]) -> list[Row]:
    total, elapsed = prune["total"], prune["elapsed"]
    runs, cascaded = (total.runs, total.cascaded) if total else (0, 0)
    insert_runs = INSERT_ORDERS_PER_SECOND
    insert_rows = INSERT_ORDERS_PER_SECOND * (1 + EVENTS_PER_ORDER)
    batches_ms = [b * 1000 for b in prune["batches"]]
    goal = f">= {PRUNE_GOAL_TIMES} x bench 3's inserts"
    rows = [
        Row(
            "prune: runs deleted per second",
            "/s",
            runs / elapsed,
            insert_runs,
            "higher",
            goal,
            runs / elapsed >= PRUNE_GOAL_TIMES * insert_runs,
        ),
        Row(
            "prune: rows deleted per second (runs + events)",
            "/s",
            (runs + cascaded) / elapsed,
            insert_rows,
            "higher",
            goal,
            (runs + cascaded) / elapsed >= PRUNE_GOAL_TIMES * insert_rows,
        ),
        Row("prune: batch transaction p50", "ms", percentile(batches_ms, 50), None, None),
        Row(
            "prune: batch transaction p99",
            "ms",
            percentile(batches_ms, 99),
            None,
            None,
            f"< {PRUNE_BATCH_P99_GOAL_MS:g} ms",
            percentile(batches_ms, 99) < PRUNE_BATCH_P99_GOAL_MS,
        ),
        Row("prune: batch transaction max", "ms", max(batches_ms, default=math.nan), None, None),
    ]
    lo, hi = prune["wall"]
    for path, label in (("claim", "claim (run_claim_manual) p99"), ("order_place", "order_place p99")):
        during = [s * 1000 for t, p, s in samples if p == path and lo <= t <= hi]
        quiet = [s * 1000 for t, p, s in samples if p == path and not lo <= t <= hi]
        p_during, p_quiet = percentile(during, 99), percentile(quiet, 99)
        rows.append(
            Row(
                f"{label}, prune vs none",
                "ms",
                p_during,
                p_quiet,
                goal=f"<= {GOAL} x without",
                passed=p_during <= GOAL * p_quiet,
            )
        )
    return rows


def _prune_notes(prune: dict[str, Any], prunable: dict[str, int], seconds: float) -> list[str]:
    from django.conf import settings

    total, elapsed = prune["total"], prune["elapsed"]
    runs, cascaded = (total.runs, total.cascaded) if total else (0, 0)
    rate = runs / elapsed if elapsed else math.nan
    left = max(prunable["runs"] - runs, 0)
    how = "pruned everything" if prune["finished"] else f"stopped after {seconds:g} s (a sample of the backlog)"
    return [
        f"prune: history_prune(now=NOW) with retention {PRUNE_RUN_RETENTION_DAYS} days "
        f"(dead {PRUNE_DEAD_RETENTION_DAYS}), batch size {prune['batch_size']:,} (SCHEDULER_PRUNE_BATCH_SIZE), "
        f"a rest of {settings.SCHEDULER_PRUNE_PAUSE_SECONDS:g} s after each (SCHEDULER_PRUNE_PAUSE_SECONDS, "
        "counted in the rates, not in a batch's time); "
        f"{how}: {runs:,} runs and {cascaded:,} events in {len(prune['batches'])} batches in {elapsed:.1f} s; "
        f"{prunable['runs']:,} runs were prunable, the rest would take about {left / rate / 60:.0f} min more"
        if rate
        else "prune: nothing deleted",
        f"prune: reference rates are bench 3's insert rate: {INSERT_ORDERS_PER_SECOND} orders/s x "
        f"(1 run + {EVENTS_PER_ORDER} events: claimed, enqueued, started, succeeded)",
        f"prune: a second process claimed and placed an order every {LOAD_INTERVAL * 1000:.0f} ms throughout; "
        "'without' is the same load before and after the prune",
    ]


# --- The run ------------------------------------------------------------------------------------


def table_sizes(url: str) -> dict[str, int]:
    tables = ("job_runs", "job_run_events", "orders_order", "carts_cart", "payouts_payout")
    return {t: int(sql_value(url, f"SELECT count(*) FROM {t}")) for t in tables}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000_000, help="delayed runs in the long history")
    parser.add_argument("--days", type=int, default=60, help="days the long history spans")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls of each path (the median is kept)")
    parser.add_argument("--prune-seconds", type=float, default=120.0, help="longest the prune is measured for")
    parser.add_argument("--prune-quiet", type=float, default=30.0, help="seconds of the load without the prune")
    parser.add_argument("--keep", action="store_true", help="keep the databases afterwards (dropped by default)")
    parser.add_argument(
        "--reuse", action="store_true", help="time the databases a --keep run (or an interrupted one) left, unpruned"
    )
    args = parser.parse_args()
    if args.runs < args.days or args.days <= REFERENCE_DAYS:
        parser.error(f"--days must be more than {REFERENCE_DAYS} (the reference) and --runs at least --days")
    names = {phase: f"{NAME}_{phase.replace(' ', '_')}" for phase in PHASES}
    databases = {phase: DATABASE_PREFIX + name for phase, name in names.items()}
    m: dict[str, Any] = {"generated": {}, "sizes": {}, "tables": {}}
    if args.reuse:
        url = database_url(names["long history"])
        django_setup(url, **_bench_env())
        _test_settings()
        m["sizes"] = {phase: table_sizes(database_url(names[phase])) for phase in (REFERENCE, "long history")}
        m["generated"] = {REFERENCE: math.nan, "long history": math.nan}
    else:
        url = _databases_generate(args, names, databases, m)
    m["disk"] = sql_value(url, "SELECT pg_size_pretty(pg_database_size(current_database()))")
    m["times"] = paths_time(databases, args.repeat)
    use_database(databases["long history"])
    m["prune"], m["prune notes"] = prune_measure(url, seconds=args.prune_seconds, quiet=args.prune_quiet)
    code = report(args, m).finish()
    if not args.keep:
        from django.db import connections

        connections.close_all()
        for name in names.values():
            database_drop(name)  # several GB at the full size
    return code


def _databases_generate(
    args: argparse.Namespace, names: dict[str, str], databases: dict[str, str], m: dict[str, Any]
) -> str:
    """The three databases, each a copy of the one before with more added; return the last's URL."""
    empty_url = database_create(names["empty"])
    django_setup(empty_url, **_bench_env())
    _test_settings()
    fixtures_create(empty_url)
    newest, older = spans(args.runs, args.days)
    use_database(databases[REFERENCE])  # nothing connected to the source of the copy
    url = database_clone(names["empty"], names[REFERENCE])
    with Stopwatch() as watch:
        data_load(url, newest)
        carts_load(url, max(args.runs // args.days // 4, 1))
        schedules_registered_long_ago()
    m["generated"][REFERENCE] = watch.seconds
    m["sizes"][REFERENCE] = table_sizes(url)
    use_database(databases["long history"])
    url = database_clone(names[REFERENCE], names["long history"])
    with Stopwatch() as watch:
        m["tables"] = data_load(url, older)
    m["generated"]["long history"] = watch.seconds
    m["sizes"]["long history"] = table_sizes(url)
    return url


def _bench_env() -> dict[str, str]:
    """A clock frozen at NOW for every path (nothing becomes due while it is measured)."""
    return {
        "TIFFIN_CLOCK_START": NOW.isoformat(),
        "TIFFIN_CLOCK_SPEED": "1e-12",
        "TIFFIN_CLOCK_ANCHOR": str(time.time()),
    }


def _test_settings() -> None:
    """What the test Client needs: its host allowed, plain HTTP, static files without a manifest."""
    from django.test.utils import override_settings

    override_settings(
        ALLOWED_HOSTS=["testserver"],
        SECURE_SSL_REDIRECT=False,
        STORAGES={
            "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        },
    ).enable()


def report(args: argparse.Namespace, m: dict[str, Any]) -> Report:
    big, day = m["sizes"]["long history"], m["sizes"][REFERENCE]
    rep = Report(
        name=NAME,
        title=(
            f"6. history: {big['job_runs']:,} runs, {big['job_run_events']:,} events, {big['orders_order']:,} orders "
            f"over {args.days} days"
        ),
        command=f"python -m bench.history --runs {args.runs} --days {args.days}",
        project=f"each path on {args.days} days of history ({m['disk']} on disk)",
        reference=f"the same path on the {REFERENCE} ({day['job_runs']:,} runs, {day['job_run_events']:,} events)",
    )
    empty, first, long = (m["times"][phase] for phase in PHASES)
    for name in long:
        ratio = long[name] / first[name] if first[name] else None
        rep.add(
            Row(
                name,
                "ms",
                long[name] * 1000,
                first[name] * 1000,
                goal=f"<= {GOAL} x {REFERENCE}",
                passed=ratio is not None and ratio <= GOAL,
            )
        )
    rep.add(*m["prune"])
    for text in m["prune notes"]:
        rep.note(text)
    rep.note("empty history (no rows at all), ms: " + ", ".join(f"{n} {v * 1000:.1f}" for n, v in empty.items()))
    if math.isnan(m["generated"][REFERENCE]):
        rep.note("the databases were generated by an earlier run and reused (--reuse), not timed here")
    else:
        rep.note(
            f"generated with set-based SQL: the {REFERENCE} in {m['generated'][REFERENCE]:.0f} s, the other "
            f"{args.days - REFERENCE_DAYS} days in {m['generated']['long history']:.0f} s ("
            + ", ".join(f"{t} {s:.0f} s" for t, s in m["tables"].items())
            + "), not timed above"
        )
    rep.note(
        f"each figure is the median of {args.repeat} interleaved rounds (one call per database, each after a warm-up), "
        f"on a clock frozen at {NOW:%Y-%m-%d %H:%M} UTC"
    )
    return rep


if __name__ == "__main__":
    raise SystemExit(main())
