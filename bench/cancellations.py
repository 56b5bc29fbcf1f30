"""Benchmark 3: stale-order cancellation, stepped up until lateness breaks.

Eight placer processes place orders at a rate that steps up (200, 400, 700, 1,000, 1,200
and 1,400 orders per second together, 30 s each; ``--quick``: 10 s each), with the accept
timeout shortened to 10 seconds (ORDER_ACCEPT_TIMEOUT_SECONDS=10). For about 70 % of the
orders the restaurant accepts, 0.5 to 8 seconds after placing (the placer does it, with
``order_accept``'s conditional UPDATE); the rest must be cancelled at their deadline.
After each step the side gets until ``--drain`` seconds past the step's last deadline to
cancel what is due; a step that leaves orders uncancelled ends that side's stepping (the
next step would measure the backlog, not its rate). Three sides, each in its own
database, with the same placers, seeds and load:

- project: ``order_place`` creates each order's delayed ``cancel-stale-order`` run in
  the same statement (its claim and event as CTEs of the order's INSERT); one
  ``manage.py worker`` (the scheduler loop and a django-q2 cluster) enqueues the due
  runs in batches and cancels the still-placed orders.
- raw: the ceiling of this machine for the same work. The placer inserts the order and
  a due row with psycopg in one transaction; one process (``--raw-worker``) takes due
  rows with ``FOR UPDATE SKIP LOCKED`` in batches, deletes them and cancels their orders
  if still placed, in one statement; no job_runs, no events, no task queue.
- django-q2: each order is created with one one-off ``Schedule`` (``schedule_type=ONCE,
  next_run=deadline``, same transaction) and one ``manage.py qcluster`` with django-q2's
  own scheduler on (``bench/settings_djangoq.py``) runs them (the same conditional
  UPDATE, ``orders_cancel_unaccepted``). It steps only while it misses nothing.

Lateness of a cancellation = ``cancelled_at - (placed_at + 10 s)``; what is still not
cancelled when the drain ends counts as missed, and its lateness as at least that long.
The figure is the ceiling: the highest rate placed with p99 lateness under 1 s and
nothing missed or wrongly cancelled. Goals: the project's ceiling at least 1,000
orders/s, or, where the raw pipeline's own ceiling is below that, at least half of it; at
least 0.9 x the raw pipeline's; and no wrong cancellation at any rate. ``--workers 2`` and
``--pgbouncer`` measure the project alone with two worker processes or behind a
transaction-mode PgBouncer; behind PgBouncer the goal is at least 0.9 x the direct ceiling
of the last full run (bench/results/cancellations.json, written earlier by the same
``make bench``). Every worker and placer keeps its database connections
(DATABASE_CONN_MAX_AGE=60).

    python -m bench.cancellations [--quick] [--rates 200,400,...] [--step-seconds 30]
    python -m bench.cancellations --only project --workers 2 [--pgbouncer]
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    PYTHON,
    RESULTS,
    Child,
    Report,
    Row,
    child_env,
    child_start,
    children,
    command_line,
    database_create,
    django_setup,
    fmt,
    official_run,
    percentile,
    pgbouncer_started,
    sql_run,
)

NAME = "cancellations"
TIMEOUT_SECONDS = 10
TIMEOUT = timedelta(seconds=TIMEOUT_SECONDS)
ACCEPT_SHARE = 0.7
ACCEPT_AFTER = (0.5, 8.0)  # seconds after placing: always well before the deadline
# Placer processes: each waits on its own round trips, so on a busy machine one process
# cannot place hundreds of orders a second; eight share the load.
PLACERS = 8
RESTAURANTS = 100
# Both sides held every step up to 1,400 in the last runs, so the steps go on past it: a
# ceiling is only measured where some step fails.
RATES = (200.0, 400.0, 700.0, 1000.0, 1200.0, 1400.0, 1700.0, 2000.0)
SIDES = ("project", "raw", "reference")
SIDE_LABELS = {"project": "project", "raw": "raw SQL", "reference": "django-q2"}
P99_GOAL_SECONDS = 1.0
RATE_GOAL = 1000.0
# The project's ceiling over the raw pipeline's, and behind PgBouncer over its own direct one.
SHARE_GOAL = 0.9
# The raw pipeline's worker: due rows per transaction, and its rest when it took fewer.
RAW_BATCH = 500
RAW_POLL_SECONDS = 0.1
RAW_DUE_TABLE = """
CREATE TABLE bench_raw_due (
    id bigserial PRIMARY KEY,
    order_id bigint NOT NULL REFERENCES orders_order (id),
    due_at timestamptz NOT NULL
);
CREATE INDEX bench_raw_due_due_at ON bench_raw_due (due_at);
"""
# Take a batch of due rows, delete them and cancel their orders still placed: one statement.
RAW_CANCEL = """
WITH due AS (
    SELECT id FROM bench_raw_due WHERE due_at <= now() ORDER BY due_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
), taken AS (
    DELETE FROM bench_raw_due d USING due WHERE d.id = due.id RETURNING d.order_id
), cancelled AS (
    UPDATE orders_order o SET status = 'cancelled', cancelled_at = now(), cancel_reason = 'not accepted in time'
    FROM taken WHERE o.id = taken.order_id AND o.status = 'placed' RETURNING o.id
)
SELECT (SELECT count(*) FROM taken), (SELECT count(*) FROM cancelled)
"""
RAW_PLACE = """
WITH placed AS (
    INSERT INTO orders_order (restaurant_id, customer_ref, status, total, placed_at, cancel_reason)
    VALUES (%(restaurant)s, %(ref)s, 'placed', 12.50, %(now)s, '') RETURNING id
)
INSERT INTO bench_raw_due (order_id, due_at) SELECT id, %(due)s FROM placed RETURNING order_id
"""


# --- The placer processes (python -m bench.cancellations --placer ...) --------------------


def reference_cancel(order_id: int) -> int:
    """The reference's task: cancel the order if it is still placed (django-q2 runs it)."""
    from orders.services import orders_cancel_unaccepted

    return orders_cancel_unaccepted(order_ids=[order_id])


def placer(
    url: str,
    mode: str,
    out: Path,
    start_at: float,
    rate: float,
    seconds: float,
    seed: int,
    tag: str,
    *,
    place: Callable[[Any, str], tuple[int, datetime]] | None = None,
    settings_module: str = "tiffin.settings",
) -> None:
    """Place ``rate * seconds`` orders on schedule from ``start_at`` and accept ~70 % of them.

    ``place`` (default: the ``mode``'s own) places one order and schedules its cancellation;
    bench/peers/ passes its peers' (with their ``settings_module``)."""
    django_setup(url, ORDER_ACCEPT_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS), DJANGO_SETTINGS_MODULE=settings_module)
    from orders.models import Restaurant

    restaurants = list(Restaurant.objects.order_by("id"))
    rng = random.Random(seed)
    if place is None:
        place = {"project": _place_project, "raw": _place_raw, "reference": _place_reference}[mode]
    total = round(rate * seconds)
    accepts: list[tuple[float, int, datetime]] = []
    seen: dict[str, Any] = {"placed": 0, "accepted": 0, "errors": [], "lag": 0.0}
    while seen["placed"] < total or accepts:
        next_place = start_at + seen["placed"] / rate if seen["placed"] < total else math.inf
        if accepts and accepts[0][0] <= next_place:
            due, order_id, deadline = heapq.heappop(accepts)
            _accept(order_id, deadline, due, seen)
            continue
        seen["lag"] = max(seen["lag"], _sleep_until(next_place))
        try:
            order_id, deadline = place(rng.choice(restaurants), f"{tag}-{seed}-{seen['placed']}")
        except Exception as error:
            seen["errors"].append(f"place: {type(error).__name__}: {error}"[:300])
            order_id = 0
        seen["placed"] += 1
        seen["placed_until"] = time.time()
        if order_id and rng.random() < ACCEPT_SHARE:
            heapq.heappush(accepts, (time.time() + rng.uniform(*ACCEPT_AFTER), order_id, deadline))
    out.write_text(json.dumps(seen))


def _sleep_until(moment: float) -> float:
    """Sleep until ``moment`` (UNIX time); return how late we already were (0 if on time)."""
    ahead = moment - time.time()
    if ahead > 0:
        time.sleep(ahead)
    return max(-ahead, 0.0)


def _place_project(restaurant: Any, customer_ref: str) -> tuple[int, datetime]:
    from orders.services import order_place
    from tiffin import clock

    order = order_place(restaurant=restaurant, customer_ref=customer_ref, total=Decimal("12.50"), now=clock.now())
    return int(order.pk), order.placed_at + TIMEOUT


def _place_raw(restaurant: Any, customer_ref: str) -> tuple[int, datetime]:
    """The order and its due row in one transaction, one statement, on Django's psycopg connection."""
    from django.db import connection, transaction

    from tiffin import clock

    now = clock.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(RAW_PLACE, {"restaurant": restaurant.pk, "ref": customer_ref, "now": now, "due": now + TIMEOUT})
        order_id = cursor.fetchone()[0]
    return int(order_id), now + TIMEOUT


def _place_reference(restaurant: Any, customer_ref: str) -> tuple[int, datetime]:
    from django.db import transaction
    from django_q.models import Schedule
    from django_q.tasks import schedule

    from orders.models import Order
    from tiffin import clock

    now = clock.now()
    with transaction.atomic():
        order = Order.objects.create(
            restaurant=restaurant, customer_ref=customer_ref, total=Decimal("12.50"), placed_at=now
        )
        schedule(
            "bench.cancellations.reference_cancel",
            order.pk,
            schedule_type=Schedule.ONCE,
            next_run=now + TIMEOUT,
        )
    return int(order.pk), now + TIMEOUT


def _accept(order_id: int, deadline: datetime, due: float, seen: dict[str, Any]) -> None:
    """The restaurant accepts: the same conditional UPDATE as ``order_accept``, in one
    statement (acceptance is part of the load here, not what is measured, and the full
    service's read-back would cost the placers CPU the machine needs for the rest)."""
    from django.db import connection

    from tiffin import clock

    seen["lag"] = max(seen["lag"], _sleep_until(due))
    try:
        now = clock.now()
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE orders_order SET status = 'accepted', accepted_at = %s WHERE id = %s AND status = 'placed'",
                [now, order_id],
            )
            accepted = cursor.rowcount == 1
    except Exception as error:
        seen["errors"].append(f"accept: {type(error).__name__}: {error}"[:300])
        return
    if accepted:
        seen["accepted"] += 1
    else:
        # Refused before the order's deadline: it was cancelled too early. (After it, a
        # placer that fell behind schedule was simply too late.)
        seen.setdefault("refused" if now < deadline else "refused_late", []).append(order_id)


# --- The raw pipeline's worker (python -m bench.cancellations --raw-worker URL) ----------


def raw_worker(url: str) -> None:
    """Cancel due rows in batches until SIGTERM; rest a poll interval after a short batch."""
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    with psycopg.connect(url, autocommit=True) as conn:
        while not stopping:
            row = conn.execute(RAW_CANCEL, {"batch": RAW_BATCH}).fetchone()
            if not row or row[0] < RAW_BATCH:
                time.sleep(RAW_POLL_SECONDS)


# --- One side: a database, its worker(s), then the steps ---------------------------------


def side(mode: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Step the rate up on one side; return one result per step run."""
    direct = side_database(mode, args)
    with children(f"{NAME}-{mode}") as (started, logs), pooled(direct, args.pgbouncer, logs) as url:
        env = child_env(url, ORDER_ACCEPT_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS), DATABASE_CONN_MAX_AGE="60")
        workers = _workers_start(mode, args, env, started, logs)
        _wait_for_worker(direct, mode, workers[0])
        results: list[dict[str, Any]] = []
        cpu = sum(w.cpu_seconds() for w in workers)  # the start-up is no step's
        for number, rate in enumerate(args.rates):
            result = step(mode, args, rate, f"s{number}", urls=(url, direct), env=env, started=started, logs=logs)
            result["cpu"], cpu = sum(w.cpu_seconds() for w in workers) - cpu, sum(w.cpu_seconds() for w in workers)
            results.append(result)
            print(f"{SIDE_LABELS[mode]} at {rate:g}/s: {_line(summary(result))}", flush=True)
            if result["missed"] or result["errors_count"]:
                break
    return results


def side_database(mode: str, args: argparse.Namespace) -> str:
    """The side's database, created afresh with its restaurants (and the raw side's due
    table); return its URL."""
    suffix = {"project": "", "raw": "_raw", "reference": "_reference"}[mode]
    suffix += f"_w{args.workers}" if args.workers > 1 else ""
    suffix += "_pgbouncer" if args.pgbouncer else ""
    direct = database_create(NAME + suffix)
    sql_run(
        direct,
        "INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
        "SELECT 'Bench restaurant ' || i, 'Asia/Kolkata', 0.15, now(), true FROM generate_series(1, %s) AS i",
        [RESTAURANTS],
    )
    if mode == "raw":
        sql_run(direct, RAW_DUE_TABLE)
    return direct


def _workers_start(
    mode: str, args: argparse.Namespace, env: dict[str, str], started: list[Child], logs: Path
) -> list[Child]:
    if mode == "project":
        commands = [[PYTHON, "manage.py", "worker"]] * args.workers
    elif mode == "raw":
        commands = [[PYTHON, "-m", "bench.cancellations", "--raw-worker", env["DATABASE_URL"]]]
    else:
        env = {**env, "DJANGO_SETTINGS_MODULE": "bench.settings_djangoq"}
        commands = [[PYTHON, "manage.py", "qcluster"]]
    workers = [child_start(f"worker{n}", command, env=env, logs=logs) for n, command in enumerate(commands)]
    started += workers
    return workers


def step(
    mode: str,
    args: argparse.Namespace,
    rate: float,
    tag: str,
    *,
    urls: tuple[str, str],
    env: dict[str, str],
    started: list[Child],
    logs: Path,
    module: str = "bench.cancellations",
    start_at: float | None = None,
) -> dict[str, Any]:
    """One rate for ``args.step_seconds``: placers, then the drain; the outcome of its orders.

    The placers are ``python -m <module> --placer ...`` (bench/peers/ has its own), starting
    at ``start_at`` (default: 3 s from now)."""
    url, direct = urls
    start_at = time.time() + 3.0 if start_at is None else start_at
    outs = [logs / f"{tag}-placer{n}.json" for n in range(PLACERS)]
    placers = []
    for n, out in enumerate(outs):
        command = [PYTHON, "-m", module, "--placer", url, mode, str(out), repr(start_at), tag]
        command += ["--rate", repr(rate / PLACERS), "--step-seconds", repr(args.step_seconds), "--seed", str(n)]
        placers.append(child_start(f"{tag}-placer{n}", command, env=env, logs=logs))
    started += placers
    for child in placers:
        if child.popen.wait() != 0:
            raise SystemExit(f"{child.name} failed:\n{child.tail()}")
    placed = [json.loads(out.read_text()) for out in outs]
    drained = _drain(direct, tag, max(p["placed_until"] for p in placed) + TIMEOUT_SECONDS, args.drain)
    result = {"rate": rate, "seconds": args.step_seconds, "start_at": start_at, "placers": placed}
    result["errors_count"] = sum(len(p["errors"]) for p in placed)
    return {**result, "drained_at": drained, **_outcome(direct, tag, drained)}


@contextmanager
def pooled(direct: str, pgbouncer: bool, logs: Path) -> Iterator[str]:
    """The URL the side's processes use: ``direct``, or through a transaction-mode
    PgBouncer of its own (stopped with the benchmark, as any child)."""
    if not pgbouncer:
        yield direct
        return
    with pgbouncer_started(logs) as port:
        database = direct.rsplit("/", 1)[1]
        user = direct.split("//", 1)[1].split("@", 1)[0]
        yield f"postgres://{user}@127.0.0.1:{port}/{database}?disable_server_side_cursors=true"


def _wait_for_worker(url: str, mode: str, worker: Child) -> None:
    """The project's worker is up once its scheduler loop has made a pass; the others
    leave no trace in the database, so give them the time the project's took."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and worker.popen.poll() is None:
        if mode != "project":
            time.sleep(4.0)
            break
        if _scalar(url, "SELECT count(*) FROM job_scheduler_nodes"):
            break
        time.sleep(0.2)
    if worker.popen.poll() is not None:
        raise SystemExit(f"the worker exited:\n{worker.tail()}")


def _drain(url: str, tag: str, last_deadline: float, drain: float) -> float:
    """Wait until no order of the step is left placed, or ``drain`` seconds after its last deadline."""
    give_up = last_deadline + drain
    while time.time() < give_up:
        if time.time() > last_deadline and not _scalar(
            url, f"SELECT count(*) FROM orders_order WHERE status = 'placed' AND customer_ref LIKE '{tag}-%%'"
        ):
            break
        time.sleep(0.5)
    return time.time()


def _scalar(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0


def _outcome(url: str, tag: str, drained: float) -> dict[str, Any]:
    """Lateness of each cancellation of the step (missed ones: at least until the drain ended), and counts."""
    deadline = f"placed_at + interval '{TIMEOUT_SECONDS} seconds'"
    mine = f"customer_ref LIKE '{tag}-%%'"
    with psycopg.connect(url, autocommit=True) as conn:
        cancelled = (
            f"SELECT extract(epoch FROM cancelled_at - ({deadline})) FROM orders_order WHERE status = 'cancelled'"
        )
        late = [float(r[0]) for r in conn.execute(f"{cancelled} AND {mine}")]
        placed = f"SELECT %s - extract(epoch FROM {deadline}) FROM orders_order WHERE status = 'placed'"
        missed = [float(r[0]) for r in conn.execute(f"{placed} AND {mine}", [drained])]
        early = conn.execute(f"SELECT count(*) FROM orders_order WHERE cancelled_at < {deadline} AND {mine}").fetchone()
    return {"late": late, "missed": missed, "early": early[0] if early else 0}


# --- The report -------------------------------------------------------------------------


def lateness(result: dict[str, Any], p: float) -> float | str:
    """A percentile of the lateness; if it falls among the missed orders, a lower bound."""
    values = sorted(result["late"]) + [math.inf] * len(result["missed"])
    value = percentile(values, p)
    if math.isinf(value):
        return f"> {min(result['missed']):.0f} (missed)"
    return value


def summary(result: dict[str, Any]) -> dict[str, Any]:
    placers, rate, seconds = result["placers"], result["rate"], result["seconds"]
    placed = sum(p["placed"] for p in placers)
    # The last order was due at start + seconds - 1/rate; a placer behind schedule took longer.
    took = max(max(p["placed_until"] for p in placers) - result["start_at"], seconds - PLACERS / rate)
    p99 = lateness(result, 99)
    wrong = result["early"] + sum(len(p.get("refused", [])) for p in placers)
    return {
        "target": rate,
        "placed": placed,
        "rate": placed / (took + PLACERS / rate),
        "lag": max(p["lag"] for p in placers),
        "accepted": sum(p["accepted"] for p in placers),
        "refused_late": sum(len(p.get("refused_late", [])) for p in placers),
        "errors": [e for p in placers for e in p["errors"]],
        "cancelled": len(result["late"]),
        "missed": len(result["missed"]),
        "wrong": wrong,
        "p50": lateness(result, 50),
        "p99": p99,
        "max": lateness(result, 100),
        "cpu_per_1000": result["cpu"] / placed * 1000 if placed else math.nan,
        "held": isinstance(p99, float) and p99 < P99_GOAL_SECONDS and not result["missed"] and not wrong,
    }


def _line(s: dict[str, Any]) -> str:
    return (
        f"placed {fmt(s['rate'])}/s, p50/p99/max {fmt(s['p50'])}/{fmt(s['p99'])}/{fmt(s['max'])} s, "
        f"missed {s['missed']}, wrong {s['wrong']}, CPU {fmt(s['cpu_per_1000'])} s/1000"
    )


def ceiling(steps: list[dict[str, Any]]) -> float:
    """The highest rate placed at a step where lateness held (0 if none did)."""
    return max((s["rate"] for s in steps if s["held"]), default=0.0)


def step_figures(result: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """One step's figures for the JSON (``Report.data``), from its result and ``summary``:
    the lateness percentiles as numbers, a percentile that fell among the missed orders as
    its lower bound (how long they had waited when the drain ended) with ``bound`` set."""

    def number(value: float | str) -> float:
        return value if isinstance(value, float) else min(result["missed"])

    return {
        "target": s["target"], "rate": s["rate"], "p50": number(s["p50"]), "p99": number(s["p99"]),
        "max": number(s["max"]), "bound": not isinstance(s["p99"], float), "missed": s["missed"],
        "wrong": s["wrong"], "held": s["held"], "seconds": result["seconds"],
    }  # fmt: skip


def share_row(measure: str, mine: float, other: float | None, goal_of: str) -> Row:
    """``mine`` against ``other`` with the goal of at least SHARE_GOAL x it; reported
    without a verdict when ``other`` is unknown."""
    if other is None:
        return Row(measure, "/s", mine, None, None, f">= {SHARE_GOAL:g} x {goal_of} (not measured)", None)
    return Row(measure, "/s", mine, other, "higher", f">= {SHARE_GOAL:g} x {goal_of}", mine >= SHARE_GOAL * other)


def direct_ceiling(step_seconds: float, path: Path | None = None) -> tuple[float | None, str]:
    """The direct ceiling of the last full run (bench/results/cancellations.json) and when
    it ran; (None, why) when there is none to compare with: none recorded, or one of
    other step lengths (a 10 s step places before the first deadline, so its ceiling is
    not a 30 s step's)."""
    path = path or RESULTS / f"{NAME}.json"
    if not path.exists():
        return None, f"no {path.name} in bench/results/"
    result = json.loads(path.read_text())
    figure = result.get("data", {}).get("ceiling")
    if figure is None:
        return None, f"{path.name} (run {result['started_at']}) predates its ceiling's record"
    steps = {s["seconds"] for side in result["data"].get("steps", {}).values() for s in side if "seconds" in s}
    if steps != {step_seconds}:
        lengths = ", ".join(f"{s:g} s" for s in sorted(steps)) or "unrecorded"
        return None, f"the direct run of {result['started_at']} had steps of {lengths}, this one {step_seconds:g} s"
    return float(figure), f"the direct run of {result['started_at']} ({step_seconds:g} s steps)"


def steps_table(results: dict[str, list[dict[str, Any]]], labels: dict[str, str] = SIDE_LABELS) -> str:
    """Per rate and side (named by ``labels``): placed/s achieved, lateness, missed, wrong, worker CPU."""
    header = ["rate /s", "side", "placed /s", "p50 s", "p99 s", "max s", "missed", "wrong", "CPU s/1k", "held"]
    body = []
    for rate in sorted({r["rate"] for steps in results.values() for r in steps}):
        for mode, steps in results.items():
            for s in (summary(r) for r in steps if r["rate"] == rate):
                body.append([fmt(rate), labels[mode], fmt(s["rate"]), fmt(s["p50"]), fmt(s["p99"]),
                             fmt(s["max"]), fmt(s["missed"]), fmt(s["wrong"]), fmt(s["cpu_per_1000"]),
                             "yes" if s["held"] else "no"])  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in [header, *body]]
    return "\n".join(["per step:", *lines])


def report(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> Report:
    steps = {mode: [summary(r) for r in runs] for mode, runs in results.items()}
    mine, raw = ceiling(steps["project"]), ceiling(steps.get("raw", []))
    variant = f", {args.workers} workers" if args.workers > 1 else ""
    variant += ", behind PgBouncer (transaction mode)" if args.pgbouncer else ""
    rep = Report(
        name=NAME + ("_workers2" if args.workers > 1 else "") + ("_pgbouncer" if args.pgbouncer else ""),
        title=(
            f"3. order cancellation, stepped: {', '.join(fmt(r) for r in args.rates)} orders/s, "
            f"{args.step_seconds:g} s each, timeout {TIMEOUT_SECONDS} s{variant}"
        ),
        command=command_line("bench.cancellations"),
        project="order_place + delayed cancel-stale-order runs, manage.py worker (scheduler loop + cluster)",
        reference="raw SQL: order + due row in one transaction, one process cancelling FOR UPDATE SKIP LOCKED",
        partial=partial_run(args),
    )
    # A variant (--workers 2, --pgbouncer) runs no raw side: its ceiling is reported, the goal is the main run's.
    enough = (mine >= RATE_GOAL or (0 < raw < RATE_GOAL and mine >= raw / 2)) if "raw" in steps else None
    wrong = sum(s["wrong"] for s in steps["project"])
    rep.add(
        Row("ceiling: highest rate with p99 < 1 s, none missed", "/s", mine, raw if "raw" in steps else None,
            "higher", f">= {RATE_GOAL:,.0f}, or >= half the raw ceiling if that is below it", enough),
    )  # fmt: skip
    if "raw" in steps:
        rep.add(share_row("ceiling against the raw pipeline's", mine, raw, "raw"))
    if args.pgbouncer:
        direct, source = direct_ceiling(args.step_seconds)
        rep.add(share_row("ceiling behind PgBouncer against direct", mine, direct, "direct"))
        rep.note(f"direct ceiling from {source}")
    rep.data = {"ceiling": mine, "steps": {mode: [step_figures(r, summary(r)) for r in runs]
                                           for mode, runs in results.items()}}  # fmt: skip
    rep.add(
        Row("wrongly cancelled (early or accepted), all steps", "orders", wrong,
            sum(s["wrong"] for s in steps.get("raw", [])) if "raw" in steps else None, None, "0", wrong == 0),
        Row("placer errors, all steps", "count", sum(len(s["errors"]) for s in steps["project"]), None, None, "0",
            not any(s["errors"] for s in steps["project"])),
    )  # fmt: skip
    if "reference" in steps:
        rep.note(f"django-q2 ONCE schedules: ceiling {fmt(ceiling(steps['reference']))}/s (0: no step held)")
    rep.tables.append(steps_table(results))
    rep.note(f"each step had until {args.drain:g} s after its last deadline; what was not cancelled then is missed")
    rep.note("a side stops stepping after a step with missed orders (the next would measure the backlog)")
    rep.note("worker CPU: user + system seconds of the worker processes and their children over the step")
    rep.note("placers and workers keep their connections (DATABASE_CONN_MAX_AGE=60); 8 placers share the load")
    rep.note("measured on a shared 2-core machine: the placers, workers and PostgreSQL compete for the same CPUs")
    for error in [e for side_steps in steps.values() for s in side_steps for e in s["errors"]][:3]:
        rep.note(f"placer error: {error}")
    return rep


def main() -> int:
    parser = argument_parser()
    args = arguments(parser)
    if args.placer:
        url, mode, out, start_at, tag = args.placer
        placer(url, mode, Path(out), float(start_at), args.rate, args.step_seconds, args.seed, tag)
        return 0
    if args.raw_worker:
        raw_worker(args.raw_worker)
        return 0
    variant = args.workers > 1 or args.pgbouncer
    sides = args.only or (["project"] if variant else list(SIDES))
    if "project" not in sides:
        parser.error("--only must include project (the report is the project's)")
    return report(args, {mode: side(mode, args) for mode in sides}).finish()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=_rates, default=RATES, help="orders per second per step, comma-separated")
    parser.add_argument("--step-seconds", type=float, default=30.0, help="seconds of placing per step")
    parser.add_argument("--quick", action="store_true", help="10 s steps (for development)")
    parser.add_argument("--drain", type=float, default=20.0, help="seconds after a step's last deadline to finish")
    parser.add_argument("--workers", type=int, default=1, choices=(1, 2), help="project worker processes")
    parser.add_argument("--pgbouncer", action="store_true", help="the project's processes through PgBouncer")
    parser.add_argument("--only", choices=SIDES, action="append", help="run these sides only (repeatable)")
    parser.add_argument("--placer", nargs=5, metavar=("URL", "MODE", "OUT", "START_AT", "TAG"), help=argparse.SUPPRESS)
    parser.add_argument("--raw-worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def arguments(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """The command line parsed, ``--quick`` applied (10 s steps)."""
    args = parser.parse_args(argv)
    if args.quick:
        args.step_seconds = 10.0
    return args


def partial_run(args: argparse.Namespace) -> bool:
    """Whether this is a development run rather than one of ``make bench``'s: every side
    at the default rates, in 30 s steps with one worker and behind PgBouncer, in 10 s steps
    (``--quick``) for the two-worker variant (``bench.common.official_run``)."""
    return not official_run("cancellations", args, lambda argv: arguments(argument_parser(), argv))


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rates") from None
    if not rates or any(rate <= 0 for rate in rates):
        raise argparse.ArgumentTypeError("rates must be positive")
    return rates


if __name__ == "__main__":
    raise SystemExit(main())
