"""Benchmark 2: cart clean-up.

One million carts with about three million items (one to five each), three quarters of
them untouched for more than a week as of the nightly tick of 2026-03-30 02:00 UTC.
Generated with set-based SQL into one database, which is then cloned, so the project and
the reference start from byte-identical data.

- project: the ``clean-carts`` job through ``run_claim_manual`` and ``runs_execute`` in
  this process: batches of CART_CLEANUP_BATCH_SIZE carts, each its own transaction
  (pick with FOR UPDATE SKIP LOCKED, delete the items, then the carts, both re-checking
  ``updated_at``). Each batch's transaction is timed by wrapping the service's batch
  function (``carts.services._delete_stale_batch``), commit included.
- reference: one raw statement, ``WITH stale AS (DELETE FROM carts_cart WHERE updated_at
  < cutoff RETURNING id) DELETE FROM carts_cartitem WHERE cart_id IN (SELECT id FROM
  stale)``, in autocommit (the item foreign key is deferred, so one statement may delete
  the carts before their items).
- meanwhile, in both runs, a second process (``--toucher``) works on random carts through
  ``carts.services`` about 200 times a second: it adds an item to a live cart (must never
  fail), or touches a stale one, which must then survive if the touch succeeded (or
  report the cart missing if the clean-up got it first).

Goals: project time at most 1.5 x the reference's; p99 of the batch transactions under
200 ms; the second process sees no error, no live cart is lost, no rescued cart deleted,
no stale cart left.

    python -m bench.carts [--carts 1000000]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from psycopg import sql as pgsql

from bench.common import (
    PYTHON,
    SERVER_URL,
    Report,
    Row,
    Stopwatch,
    bulk_load,
    child_env,
    child_start,
    children,
    database_create,
    database_url,
    django_setup,
    percentile,
    sql_run,
    sql_value,
)

NAME = "carts"
AS_OF = datetime(2026, 3, 30, 2, 0, tzinfo=UTC)  # a clean-carts tick (0 2 * * *)
STALE_DAYS = 7
CUTOFF = AS_OF - timedelta(days=STALE_DAYS)
TOUCHES_PER_SECOND = 200
# Every fourth cart (id % 4 = 0) is live: touched within the week before the tick.
REFERENCE_DELETE = (
    "WITH stale AS (DELETE FROM carts_cart WHERE updated_at < %s RETURNING id) "
    "DELETE FROM carts_cartitem WHERE cart_id IN (SELECT id FROM stale)"
)


def data_generate(url: str, carts: int) -> float:
    seconds = bulk_load(
        url,
        "carts_cart",
        [
            ("SELECT setseed(0.7)", []),
            (
                "INSERT INTO carts_cart (id, customer_ref, created_at, updated_at) "
                "SELECT i, 'customer-' || i, t - interval '1 hour', t FROM ("
                "  SELECT i, CASE WHEN i %% 4 = 0 THEN %s + random() * (%s - %s)"
                "                 ELSE %s - interval '1 second' - random() * interval '30 days' END AS t"
                "  FROM generate_series(1, %s) AS i) AS x",
                [CUTOFF, AS_OF, CUTOFF, CUTOFF, carts],
            ),
            ("SELECT setval(pg_get_serial_sequence('carts_cart', 'id'), %s)", [carts]),
        ],
    )
    return seconds + bulk_load(
        url,
        "carts_cartitem",
        [
            (
                "INSERT INTO carts_cartitem (cart_id, sku, quantity, unit_price) "
                "SELECT c.id, 'sku-' || k, 1 + (c.id + k) %% 3, 1.50 + k "
                "FROM carts_cart c CROSS JOIN LATERAL generate_series(1, 1 + (c.id %% 5)::int) AS k",
                [],
            )
        ],
    )


def database_clone(source: str, target: str) -> str:
    """A byte-identical copy of ``source`` (nobody may be connected to it meanwhile)."""
    names = [pgsql.Identifier(f"tiffin_bench_{name}") for name in (target, source)]
    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(names[0]))
        conn.execute(pgsql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(*names))
    return database_url(target)


# --- The second process -----------------------------------------------------------------


def toucher(url: str, out: Path, carts: int) -> None:
    """Work on random carts until SIGTERM; write what happened to ``out`` (JSON)."""
    django_setup(url)
    from carts.errors import CartNotFoundError
    from carts.services import cart_add_item, cart_touch

    stop = False

    def request_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    rng = random.Random(7)
    seen: dict[str, Any] = {"live": 0, "rescued": [], "stale_gone": 0, "errors": [], "latency": []}
    out.with_suffix(".ready").touch()
    started = time.monotonic()
    while not stop:
        cart_id = rng.randrange(1, carts + 1)
        began = time.monotonic()
        try:
            if cart_id % 4 == 0:
                # A new SKU each time, so every success is one more item row.
                sku = f"bench-{seen['live']}"
                cart_add_item(cart_id=cart_id, sku=sku, quantity=1, unit_price=Decimal("1.00"), now=AS_OF)
                seen["live"] += 1
            else:
                cart_touch(cart_id=cart_id, now=AS_OF)
                seen["rescued"].append(cart_id)
        except CartNotFoundError:
            seen["stale_gone"] += 1 if cart_id % 4 else 0
            if cart_id % 4 == 0:
                seen["errors"].append(f"live cart {cart_id} not found")
        except Exception as error:
            seen["errors"].append(f"{type(error).__name__}: {error}"[:300])
        seen["latency"].append(time.monotonic() - began)
        _pace(started, len(seen["latency"]))
    out.write_text(json.dumps(seen))


def _pace(started: float, done: int) -> None:
    ahead = started + done / TOUCHES_PER_SECOND - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)


def with_toucher(url: str, label: str, carts: int, work: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """Run ``work`` while the second process touches carts; return (its result, what the toucher saw)."""
    with children(f"{NAME}-{label}") as (started, logs):
        out = logs / "toucher.json"
        args = [PYTHON, "-m", "bench.carts", "--toucher", url, str(out), "--carts", str(carts)]
        child = child_start("toucher", args, env=child_env(url), logs=logs)
        started.append(child)
        deadline = time.monotonic() + 60
        while not out.with_suffix(".ready").exists():
            if child.popen.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the toucher did not start:\n{child.tail()}")
            time.sleep(0.1)
        time.sleep(1.0)  # let it reach its pace before the clean-up starts
        result = work()
        child.stop()
        if not out.exists():
            raise SystemExit(f"the toucher wrote no result:\n{child.tail()}")
        return result, json.loads(out.read_text())


# --- The two ways -------------------------------------------------------------------------


def project_run() -> tuple[float, list[float], str]:
    """The job through the claim and the worker path; (seconds, each batch's seconds, final status)."""
    from carts import services
    from scheduling.execution import runs_execute
    from scheduling.models import JobRun
    from scheduling.services import run_claim_manual
    from tiffin import clock

    batches: list[float] = []
    original = services._delete_stale_batch

    def timed_batch(**kwargs: Any) -> tuple[list[int], int, int]:
        began = time.perf_counter()
        try:
            return original(**kwargs)
        finally:
            batches.append(time.perf_counter() - began)

    services._delete_stale_batch = timed_batch
    try:
        with Stopwatch() as watch:
            run = run_claim_manual(job_name="clean-carts", scheduled_for=AS_OF, now=clock.now(), enqueue=False)
            if run is None:
                raise RuntimeError("the clean-up tick was already claimed in a fresh database")
            runs_execute(run_ids=[run.id], worker="bench")
    finally:
        services._delete_stale_batch = original
    return watch.seconds, batches, JobRun.objects.get(id=run.id).status


def outcome(url: str, seen: dict[str, Any], live_items: int) -> dict[str, int]:
    """What is left: live carts, their items, stale carts, and rescued carts that are missing."""
    rescued = sorted(set(seen["rescued"]))
    return {
        "live carts": sql_value(url, "SELECT count(*) FROM carts_cart WHERE id %% 4 = 0"),
        "live items lost": live_items
        + seen["live"]
        - sql_value(url, "SELECT count(*) FROM carts_cartitem WHERE cart_id %% 4 = 0"),
        "stale left": sql_value(url, "SELECT count(*) FROM carts_cart WHERE updated_at < %s", [CUTOFF]),
        "rescued missing": len(rescued)
        - sql_value(url, "SELECT count(*) FROM carts_cart WHERE id = ANY(%s)", [rescued]),
        "rescued": len(rescued),
        "errors": len(seen["errors"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--carts", type=int, default=1_000_000)
    parser.add_argument("--toucher", nargs=2, metavar=("URL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.toucher:
        toucher(args.toucher[0], Path(args.toucher[1]), args.carts)
        return 0
    url = database_create(NAME)
    m: dict[str, Any] = {"generated": data_generate(url, args.carts)}
    m["items"] = sql_value(url, "SELECT count(*) FROM carts_cartitem")
    m["stale"] = sql_value(url, "SELECT count(*) FROM carts_cart WHERE updated_at < %s", [CUTOFF])
    live_items = sql_value(url, "SELECT count(*) FROM carts_cartitem WHERE cart_id %% 4 = 0")
    ref_url = database_clone(NAME, f"{NAME}_reference")
    for target in (url, ref_url):
        sql_run(target, "CHECKPOINT")
    m["reference"], m["ref seen"] = with_toucher(
        ref_url, "reference", args.carts, lambda: sql_run(ref_url, REFERENCE_DELETE, [CUTOFF])
    )
    m["ref left"] = outcome(ref_url, m["ref seen"], live_items)
    django_setup(url)
    (m["project"], m["batches"], m["status"]), m["seen"] = with_toucher(url, "project", args.carts, project_run)
    m["left"] = outcome(url, m["seen"], live_items)
    return report(args, m).finish()


def report(args: argparse.Namespace, m: dict[str, Any]) -> Report:
    left, ref_left, batches = m["left"], m["ref left"], m["batches"]
    p99 = percentile(batches, 99)
    live = args.carts // 4
    rep = Report(
        name=NAME,
        title=f"2. cart clean-up: {args.carts:,} carts, {m['items']:,} items, {m['stale']:,} stale",
        command="python -m bench.carts",
        project="clean-carts job: run_claim_manual + runs_execute (batches: SKIP LOCKED pick, re-checked deletes)",
        reference="one raw DELETE of the stale carts and their items (writable CTE), autocommit",
    )
    rep.add(
        Row("clean-up time", "s", m["project"], m["reference"], goal="<= 1.5 x reference",
            passed=m["project"] <= 1.5 * m["reference"]),
        Row("transactions", "count", len(batches), 1, None),
        Row("batch transaction p50", "ms", percentile(batches, 50) * 1000, None),
        Row("batch transaction p99", "ms", p99 * 1000, m["reference"] * 1000, goal="< 200 ms", passed=p99 < 0.2),
        Row("batch transaction max", "ms", max(batches, default=float("nan")) * 1000, m["reference"] * 1000),
        Row("second process: errors", "count", left["errors"], ref_left["errors"], None, "0", left["errors"] == 0),
        Row("live carts left (none lost)", "carts", left["live carts"], ref_left["live carts"], None,
            f"{live:,}", left["live carts"] == live),
        Row("live carts' items lost", "items", left["live items lost"], ref_left["live items lost"], None, "0",
            left["live items lost"] == 0),
        Row("rescued carts deleted anyway", "carts", left["rescued missing"], ref_left["rescued missing"], None,
            "0", left["rescued missing"] == 0),
        Row("stale carts left", "carts", left["stale left"], ref_left["stale left"], None, "0",
            left["stale left"] == 0 and m["status"] == "succeeded"),
        Row("second process: slowest change", "ms", max(m["seen"]["latency"]) * 1000,
            max(m["ref seen"]["latency"]) * 1000),
    )  # fmt: skip
    rep.note(f"batch size {_batch_size()} carts; data generated in {m['generated']:.1f} s (not timed above)")
    rep.note(
        f"second process: {len(m['seen']['latency']):,} changes during the project's run "
        f"({m['seen']['live']:,} items added to live carts, {left['rescued']:,} stale carts rescued by a touch, "
        f"{m['seen']['stale_gone']:,} found already deleted)"
    )
    rep.note("the reference's one statement holds the lock on every stale cart until it commits: a touch waits it out")
    return rep


def _batch_size() -> int:
    from django.conf import settings

    return int(settings.CART_CLEANUP_BATCH_SIZE)


if __name__ == "__main__":
    raise SystemExit(main())
