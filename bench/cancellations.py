"""Benchmark 3: stale-order cancellation under a sustained load.

Eight placer processes place orders at 200 per second together for 60 seconds, with the
accept timeout shortened to 10 seconds (ORDER_ACCEPT_TIMEOUT_SECONDS=10). For about 70 %
of the orders the restaurant accepts, 0.5 to 8 seconds after placing (the placer does it,
with ``order_accept``'s conditional UPDATE); the rest must be cancelled at their deadline. One worker
process does the cancelling:

- project: ``order_place`` creates each order's delayed ``cancel-stale-order`` run in
  the same transaction; one ``manage.py worker`` (the scheduler loop and a django-q2
  cluster) enqueues the due runs in batches and cancels the still-placed orders.
- reference, in its own database after the project's phase, with the same placers, the
  same seeds and the same load: each order is created with one django-q2 one-off
  ``Schedule`` (``schedule_type=ONCE, next_run=deadline``, in the same transaction), and
  one ``manage.py qcluster`` with django-q2's own scheduler switched on
  (``bench/settings_djangoq.py``) runs them; the task cancels the order if it is still
  placed (the same conditional UPDATE, ``orders_cancel_unaccepted``).

Lateness of a cancellation = ``cancelled_at - (placed_at + 10 s)``. After the last
deadline each side gets up to ``--drain`` seconds to finish; what is still not cancelled
then counts as missed, and its lateness as at least that long. Goals (project): p99
lateness under 2 s, no order missed, none cancelled early or after its restaurant
accepted it, and the load really applied (at least 190 orders per second placed). Both
workers keep their database connections (DATABASE_CONN_MAX_AGE=60, as recommended for
worker processes in .env.example).

    python -m bench.cancellations [--rate 200] [--seconds 60] [--drain 45]
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    PYTHON,
    Child,
    Report,
    Row,
    child_env,
    child_start,
    children,
    database_create,
    django_setup,
    percentile,
    sql_run,
)

NAME = "cancellations"
TIMEOUT_SECONDS = 10
TIMEOUT = timedelta(seconds=TIMEOUT_SECONDS)
ACCEPT_SHARE = 0.7
ACCEPT_AFTER = (0.5, 8.0)  # seconds after placing: always well before the deadline
# Placer processes: each waits on its own round trips, so on a busy machine one process
# cannot place 200 orders a second; eight share the load (about 25 a second each).
PLACERS = 8
RESTAURANTS = 100
MODES = ("project", "reference")


# --- The placer processes (python -m bench.cancellations --placer ...) --------------------


def reference_cancel(order_id: int) -> int:
    """The reference's task: cancel the order if it is still placed (django-q2 runs it)."""
    from orders.services import orders_cancel_unaccepted

    return orders_cancel_unaccepted(order_ids=[order_id])


def placer(url: str, mode: str, out: Path, start_at: float, rate: float, seconds: float, seed: int) -> None:
    """Place ``rate * seconds`` orders on schedule from ``start_at`` and accept ~70 % of them."""
    django_setup(url, ORDER_ACCEPT_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS))
    from orders.models import Restaurant

    restaurants = list(Restaurant.objects.order_by("id"))
    rng = random.Random(seed)
    place = _place_project if mode == "project" else _place_reference
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
            order_id, deadline = place(rng.choice(restaurants), f"bench-{seed}-{seen['placed']}")
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


# --- One phase: a database, a worker, the placers, the drain ------------------------------


def phase(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    url = database_create(NAME if mode == "project" else f"{NAME}_reference")
    sql_run(
        url,
        "INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
        "SELECT 'Bench restaurant ' || i, 'Asia/Kolkata', 0.15, now(), true FROM generate_series(1, %s) AS i",
        [RESTAURANTS],
    )
    # Both workers keep their connections (the recommended setting for worker processes;
    # with 0, django-q2's broker reconnects on every poll and every task).
    env = child_env(url, ORDER_ACCEPT_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS), DATABASE_CONN_MAX_AGE="60")
    if mode == "project":
        worker = [PYTHON, "manage.py", "worker"]
    else:
        env["DJANGO_SETTINGS_MODULE"] = "bench.settings_djangoq"
        worker = [PYTHON, "manage.py", "qcluster"]
    with children(f"{NAME}-{mode}") as (started, logs):
        started.append(child_start("worker", worker, env=env, logs=logs))
        _wait_for_worker(url, mode, started[0])
        start_at = time.time() + 3.0
        outs = [logs / f"placer{n}.json" for n in range(PLACERS)]
        for n, out in enumerate(outs):
            command = [PYTHON, "-m", "bench.cancellations", "--placer", url, mode, str(out), repr(start_at)]
            command += ["--rate", repr(args.rate / PLACERS), "--seconds", repr(args.seconds), "--seed", str(n)]
            started.append(child_start(f"placer{n}", command, env=env, logs=logs))
        for child in started[1:]:
            if child.popen.wait() != 0:
                raise SystemExit(f"{child.name} failed:\n{child.tail()}")
        placed = [json.loads(out.read_text()) for out in outs]
        drained = _drain(url, max(p["placed_until"] for p in placed) + TIMEOUT_SECONDS, args.drain)
        worker_cpu = started[0].cpu_seconds()
    return {
        "url": url,
        "start_at": start_at,
        "placers": placed,
        "drained_at": drained,
        "worker_cpu": worker_cpu,
        **_outcome(url, drained),
    }


def _wait_for_worker(url: str, mode: str, worker: Child) -> None:
    """The project's worker is up once its scheduler loop has made a pass; django-q2's
    cluster leaves no trace in the database, so give it the time the project's took."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and worker.popen.poll() is None:
        if mode == "reference":
            time.sleep(4.0)
            break
        if _scalar(url, "SELECT count(*) FROM job_scheduler_nodes"):
            break
        time.sleep(0.2)
    if worker.popen.poll() is not None:
        raise SystemExit(f"the worker exited:\n{worker.tail()}")


def _drain(url: str, last_deadline: float, drain: float) -> float:
    """Wait until no order is left placed, or ``drain`` seconds after the last deadline."""
    give_up = last_deadline + drain
    while time.time() < give_up:
        if time.time() > last_deadline and not _scalar(
            url, "SELECT count(*) FROM orders_order WHERE status = 'placed'"
        ):
            break
        time.sleep(0.5)
    return time.time()


def _scalar(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0


def _outcome(url: str, drained: float) -> dict[str, Any]:
    """Lateness of each cancellation (missed ones: at least until the drain ended), and counts."""
    deadline = f"placed_at + interval '{TIMEOUT_SECONDS} seconds'"
    with psycopg.connect(url, autocommit=True) as conn:
        late = [float(r[0]) for r in conn.execute(f"SELECT extract(epoch FROM cancelled_at - ({deadline})) "
                                                 "FROM orders_order WHERE status = 'cancelled'")]  # fmt: skip
        missed = [float(r[0]) for r in conn.execute(f"SELECT %s - extract(epoch FROM {deadline}) "
                                                   "FROM orders_order WHERE status = 'placed'", [drained])]  # fmt: skip
        span = conn.execute(
            "SELECT extract(epoch FROM max(cancelled_at) - min(cancelled_at)) FROM orders_order"
        ).fetchone()
        early = conn.execute(f"SELECT count(*) FROM orders_order WHERE cancelled_at < {deadline}").fetchone()
    return {
        "late": late,
        "missed": missed,
        "span": float(span[0] or 0) if span else 0.0,
        "early": early[0] if early else 0,
    }


# --- The report -------------------------------------------------------------------------


def lateness(result: dict[str, Any], p: float) -> float | str:
    """A percentile of the lateness; if it falls among the missed orders, a lower bound."""
    values = sorted(result["late"]) + [math.inf] * len(result["missed"])
    value = percentile(values, p)
    if math.isinf(value):
        return f"> {min(result['missed']):.0f} (missed)"
    return value


def summary(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    placers = result["placers"]
    placed = sum(p["placed"] for p in placers)
    # The last order was due at start + seconds - 1/rate; a placer behind schedule took longer.
    took = max(max(p["placed_until"] for p in placers) - result["start_at"], args.seconds - PLACERS / args.rate)
    return {
        "placed": placed,
        "rate": placed / (took + PLACERS / args.rate),
        "lag": max(p["lag"] for p in placers),
        "accepted": sum(p["accepted"] for p in placers),
        "refused_late": sum(len(p.get("refused_late", [])) for p in placers),
        "errors": [e for p in placers for e in p["errors"]],
        "cancelled": len(result["late"]),
        "missed": len(result["missed"]),
        "throughput": len(result["late"]) / result["span"] if result["span"] else 0.0,
        "wrong": result["early"] + sum(len(p.get("refused", [])) for p in placers),
        "worker_cpu_per_1000": result["worker_cpu"] / placed * 1000,
    }


def report(args: argparse.Namespace, project: dict[str, Any], reference: dict[str, Any]) -> Report:
    mine, theirs = summary(project, args), summary(reference, args)
    p99 = lateness(project, 99)
    rep = Report(
        name=NAME,
        title=f"3. order cancellation: {args.rate:g} orders/s for {args.seconds:g} s, timeout {TIMEOUT_SECONDS} s",
        command="python -m bench.cancellations",
        project="order_place + delayed cancel-stale-order runs, one manage.py worker (scheduler loop + cluster)",
        reference="one django-q2 ONCE Schedule per order, one manage.py qcluster with django-q2's scheduler on",
    )
    rep.add(
        Row("orders placed per second", "/s", mine["rate"], theirs["rate"], None, f">= {0.95 * args.rate:g}",
            mine["rate"] >= 0.95 * args.rate),
        Row("orders cancelled (not accepted)", "orders", mine["cancelled"], theirs["cancelled"], None),
        Row("lateness p50", "s", lateness(project, 50), lateness(reference, 50)),
        Row("lateness p99", "s", p99, lateness(reference, 99), goal="< 2 s",
            passed=isinstance(p99, float) and p99 < 2.0),
        Row("lateness max", "s", lateness(project, 100), lateness(reference, 100)),
        Row("cancellations per second", "/s", mine["throughput"], theirs["throughput"], "higher"),
        Row("orders missed (still placed)", "orders", mine["missed"], theirs["missed"], None, "0", mine["missed"] == 0),
        Row("wrongly cancelled (early or accepted)", "orders", mine["wrong"], theirs["wrong"], None, "0",
            mine["wrong"] == 0),
        Row("placer errors", "count", len(mine["errors"]), len(theirs["errors"]), None, "0", not mine["errors"]),
        Row("worker CPU per 1,000 orders", "s", mine["worker_cpu_per_1000"], theirs["worker_cpu_per_1000"]),
    )  # fmt: skip
    rep.note(f"accepted by restaurants: {mine['accepted']:,} (project), {theirs['accepted']:,} (reference)")
    late = f"{mine['refused_late']:,} (project), {theirs['refused_late']:,} (reference)"
    rep.note(f"accepts that came after the deadline (placer behind schedule) and were refused: {late}")
    rep.note(f"each side had until {args.drain:g} s after the last deadline; what was not cancelled then is missed")
    rep.note(
        f"placers fell behind schedule by at most {mine['lag']:.2f} s (project), {theirs['lag']:.2f} s (reference)"
    )
    rep.note("both workers and the placers run with DATABASE_CONN_MAX_AGE=60 (persistent connections)")
    rep.note("worker CPU: user + system seconds of the worker process and its children, start to end of drain")
    rep.note("django-q2 1.11.1 runs its scheduler about every 30 s (hard-coded), handling every due schedule at once")
    for error in (mine["errors"] + theirs["errors"])[:3]:
        rep.note(f"placer error: {error}")
    return rep


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="orders per second, all placers together")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--drain", type=float, default=45.0, help="seconds after the last deadline to finish")
    parser.add_argument("--placer", nargs=4, metavar=("URL", "MODE", "OUT", "START_AT"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=MODES, help="run one side only (to investigate; writes no result)")
    args = parser.parse_args()
    if args.placer:
        url, mode, out, start_at = args.placer
        placer(url, mode, Path(out), float(start_at), args.rate, args.seconds, args.seed)
        return 0
    if args.only:
        result = phase(args.only, args)
        print(json.dumps({k: v for k, v in summary(result, args).items() if k != "errors"}, indent=1))
        print("lateness p50/p99/max:", [lateness(result, p) for p in (50, 99, 100)])
        return 0
    results = {mode: phase(mode, args) for mode in MODES}
    return report(args, results["project"], results["reference"]).finish()


if __name__ == "__main__":
    raise SystemExit(main())
