"""Benchmark 1: payout catch-up.

10,000 restaurants in Asia/Kolkata, Europe/London and America/New_York, each with four
finished, unpaid business weeks as of the weekly tick of Sunday 2026-03-29 20:30 UTC
(New York's second week is its 167-hour DST week), 200 delivered orders a week-set each:
two million delivered orders in the paid weeks, plus orders that must not be paid
(delivered in the unfinished current week, or cancelled). Generated with set-based SQL.

- project: the ``weekly-payouts`` job as a catch-up run: ``run_claim_manual`` (the claim
  in job_runs) and ``runs_execute`` in this process (start with a fence, the handler,
  ``fence_check`` in every batch's transaction, finish), timed end to end.
- reference: one hand-written INSERT ... SELECT that computes the same payouts (weeks
  from ``generate_series`` over local Mondays and ``AT TIME ZONE``, orders summed per
  restaurant and week) into the same payout table (same indexes, constraints and
  deferred foreign keys, checked at its commit); its rows are then set aside in
  ``bench_reference_payouts`` (untimed) and the table emptied for the project.
- naive: a loop of ORM queries per restaurant and week (exists? aggregate, create), on a
  tenth of the restaurants, writing into the real table after the project's rows for
  those restaurants are removed.

Both run ``--rounds`` times (default 2), alternating, each round on an empty ledger, and
each side's faster round is reported. Goals: project time at most 1.5 x the reference's; payout rows identical (every
business column, both directions), for the project and for the naive loop.

    python -m bench.payouts [--restaurants 10000] [--orders-per-restaurant 200]
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from bench.common import Report, Row, Stopwatch, bulk_load, database_create, django_setup, sql_run, sql_value

NAME = "payouts"
ZONES = ("Asia/Kolkata", "Europe/London", "America/New_York")
AS_OF = datetime(2026, 3, 29, 20, 30, tzinfo=UTC)  # a weekly-payouts tick (30 20 * * 0)
WEEKS = 4
REFERENCE_TABLE = "bench_reference_payouts"
BUSINESS_COLUMNS = (
    "restaurant_id, week_start_local, period_start, period_end, gross, commission, net, order_count, commission_rate"
)

# The reference: every finished week of every active restaurant from its onboarding week,
# local Mondays turned into UTC bounds by AT TIME ZONE (DST weeks last 167 or 169 hours),
# only weeks without a payout yet, and per week the delivered orders summed by a LATERAL
# index-only range scan of order_delivered_by_restaurant (a zero payout for an empty week).
REFERENCE_INSERT = """
INSERT INTO payouts_payout (
    restaurant_id, week_start_local, period_start, period_end, gross, commission, net, order_count,
    commission_rate, tzdata_version, job_run_id, fence, created_at
)
SELECT w.restaurant_id, w.week_start_local, w.period_start, w.period_end,
       s.gross, ROUND(s.gross * w.commission_rate, 2), s.gross - ROUND(s.gross * w.commission_rate, 2),
       s.order_count, w.commission_rate, 'reference', NULL, NULL, now()
FROM (
    SELECT r.id AS restaurant_id, r.commission_rate, monday::date AS week_start_local,
           monday AT TIME ZONE r.timezone AS period_start,
           (monday + interval '7 days') AT TIME ZONE r.timezone AS period_end
    FROM orders_restaurant r,
         generate_series(date_trunc('week', r.onboarded_at AT TIME ZONE r.timezone),
                         %(as_of)s AT TIME ZONE r.timezone, interval '7 days') AS monday
    WHERE r.is_active
) w
CROSS JOIN LATERAL (
    SELECT COALESCE(SUM(o.total), 0) AS gross, COUNT(o.total) AS order_count
    FROM orders_order o
    WHERE o.restaurant_id = w.restaurant_id AND o.status = 'delivered'
      AND o.delivered_at >= w.period_start AND o.delivered_at < w.period_end
) s
WHERE w.period_end + %(delay)s <= %(as_of)s
  AND NOT EXISTS (
      SELECT 1 FROM payouts_payout p WHERE p.restaurant_id = w.restaurant_id AND p.period_start = w.period_start
  )
"""


# --- Data -------------------------------------------------------------------------------


def zone_spans(delay: timedelta) -> dict[str, tuple[datetime, datetime]]:
    """Per zone: the start of the first of the last WEEKS finished weeks and the end of the last."""
    from payouts.weeks import weeks_finished

    spans = {}
    for zone in ZONES:
        weeks = weeks_finished(
            timezone=zone, since=AS_OF - timedelta(weeks=WEEKS + 2), as_of=AS_OF, settlement_delay=delay
        )
        spans[zone] = (weeks[-WEEKS].period_start, weeks[-1].period_end)
    return spans


def data_generate(url: str, *, restaurants: int, per_restaurant: int, delay: timedelta) -> float:
    """Restaurants onboarded at the start of their zone's fourth-last finished week; per
    restaurant ``per_restaurant`` orders delivered across the four weeks, a twentieth as
    many delivered after them (current week: not payable yet) and as many cancelled."""
    spans = zone_spans(delay)
    zones = (
        "(VALUES " + ", ".join(["(%s, %s::timestamptz, %s::timestamptz)"] * len(spans)) + ") AS z (zone, first, last)"
    )
    span_params = [value for zone, (first, last) in spans.items() for value in (zone, first, last)]
    seconds = bulk_load(
        url,
        "orders_restaurant",
        [
            (
                "INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
                "SELECT 'Bench restaurant ' || i, z.zone, 0.0500 + (i %% 21) * 0.0075, z.first, true "
                f"FROM generate_series(1, %s) AS i JOIN {zones} ON z.zone = (%s::text[])[1 + i %% 3]",
                [restaurants, *span_params, list(ZONES)],
            )
        ],
    )
    extra = max(per_restaurant // 20, 1)
    orders = (
        "INSERT INTO orders_order (restaurant_id, customer_ref, status, total, placed_at, accepted_at, "
        "delivered_at, cancelled_at, cancel_reason) "
        "SELECT rid, 'customer-' || n, {status}, round((5 + random() * 95)::numeric, 2), "
        "t - interval '40 minutes', {accepted}, {delivered}, {cancelled}, {reason} "
        "FROM (SELECT r.id AS rid, n, {at} AS t FROM orders_restaurant r JOIN " + zones + " ON z.zone = r.timezone "
        "CROSS JOIN generate_series(1, %s) AS n) AS x"
    )
    in_weeks = "z.first + random() * (z.last - z.first)"
    after = "z.last + random() * (%s::timestamptz - z.last)"
    delivered = {"status": "'delivered'", "accepted": "t - interval '35 minutes'", "delivered": "t"}
    cancelled = {"status": "'cancelled'", "accepted": "NULL", "delivered": "NULL"}
    seconds += bulk_load(
        url,
        "orders_order",
        [
            ("SELECT setseed(0.42)", []),
            (orders.format(**delivered, cancelled="NULL", reason="''", at=in_weeks), [*span_params, per_restaurant]),
            (orders.format(**delivered, cancelled="NULL", reason="''", at=after), [AS_OF, *span_params, extra]),
            (
                orders.format(**cancelled, cancelled="t", reason="'bench'", at=in_weeks),
                [*span_params, extra],
            ),
        ],
    )
    return seconds


# --- The three ways -----------------------------------------------------------------------


def project_run() -> tuple[float, str]:
    """The job through the claim, the start with a fence and the handler; (seconds, final status)."""
    from payouts.models import PAYOUT_JOB
    from scheduling.execution import runs_execute
    from scheduling.models import JobRun
    from scheduling.services import run_claim_manual
    from tiffin import clock

    with Stopwatch() as watch:
        run = run_claim_manual(job_name=PAYOUT_JOB, scheduled_for=AS_OF, now=clock.now(), enqueue=False)
        if run is None:
            raise RuntimeError("the catch-up tick was already claimed in a fresh database")
        runs_execute(run_ids=[run.id], worker="bench")
    return watch.seconds, JobRun.objects.get(id=run.id).status


def naive_run(restaurant_ids: range, delay: timedelta) -> float:
    """What a first version often looks like: per restaurant, per week, three queries."""
    from django.db.models import Count, Sum

    from orders.models import Order, OrderStatus, Restaurant
    from payouts.models import Payout
    from payouts.weeks import weeks_finished
    from tiffin import clock
    from tiffin.tz import TZDATA_VERSION

    cent = Decimal("0.01")
    with Stopwatch() as watch:
        for r in Restaurant.objects.filter(id__in=restaurant_ids, is_active=True).order_by("id"):
            for week in weeks_finished(timezone=r.timezone, since=r.onboarded_at, as_of=AS_OF, settlement_delay=delay):
                if Payout.objects.filter(restaurant=r, period_start=week.period_start).exists():
                    continue
                sums = Order.objects.filter(
                    restaurant=r,
                    status=OrderStatus.DELIVERED,
                    delivered_at__gte=week.period_start,
                    delivered_at__lt=week.period_end,
                ).aggregate(gross=Sum("total"), count=Count("id"))
                gross = sums["gross"] or Decimal("0.00")
                commission = (gross * r.commission_rate).quantize(cent, rounding=ROUND_HALF_UP)
                Payout.objects.create(
                    restaurant=r,
                    period_start=week.period_start,
                    period_end=week.period_end,
                    week_start_local=week.week_start_local,
                    gross=gross,
                    commission=commission,
                    net=gross - commission,
                    order_count=sums["count"],
                    commission_rate=r.commission_rate,
                    tzdata_version=TZDATA_VERSION,
                    created_at=clock.now(),
                )
    return watch.seconds


def differences(url: str, where: str = "true") -> int:
    """Payout rows in one table and not the other, both ways, on every business column."""
    mine = f"SELECT {BUSINESS_COLUMNS} FROM payouts_payout WHERE {where}"
    theirs = f"SELECT {BUSINESS_COLUMNS} FROM {REFERENCE_TABLE} WHERE {where}"
    return int(
        sql_value(url, f"SELECT count(*) FROM (({mine} EXCEPT ALL {theirs}) UNION ALL ({theirs} EXCEPT ALL {mine})) d")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restaurants", type=int, default=10_000)
    parser.add_argument("--orders-per-restaurant", type=int, default=200, help="delivered in the four weeks")
    parser.add_argument("--rounds", type=int, default=2, help="alternate reference and project; keep each's best")
    args = parser.parse_args()
    url = database_create(NAME)
    django_setup(url)
    from django.conf import settings

    delay = timedelta(seconds=settings.PAYOUT_SETTLEMENT_DELAY_SECONDS)
    generated = data_generate(url, restaurants=args.restaurants, per_restaurant=args.orders_per_restaurant, delay=delay)
    sql_run(url, "CHECKPOINT")  # so neither side pays for flushing the generated data
    sql_run(url, f"CREATE TABLE {REFERENCE_TABLE} (LIKE payouts_payout INCLUDING ALL)")
    m: dict[str, Any] = {"generated": generated, "reference": float("inf"), "project": float("inf")}
    for _ in range(args.rounds):
        sql_run(url, f"TRUNCATE {REFERENCE_TABLE}, payouts_payout, job_run_events, job_runs, job_fences CASCADE")
        m["reference"] = min(m["reference"], sql_run(url, REFERENCE_INSERT, {"as_of": AS_OF, "delay": delay}))
        sql_run(url, f"INSERT INTO {REFERENCE_TABLE} SELECT * FROM payouts_payout")
        sql_run(url, "TRUNCATE payouts_payout")
        seconds, m["status"] = project_run()
        m["project"] = min(m["project"], seconds)
    m["rows"] = {t: sql_value(url, f"SELECT count(*) FROM {t}") for t in ("payouts_payout", REFERENCE_TABLE)}
    m["diff"] = differences(url)
    tenth = range(1, args.restaurants // 10 + 1)
    where = f"restaurant_id BETWEEN {tenth.start} AND {tenth.stop - 1}"
    # The ledger is append-only (a trigger refuses DELETE); the benchmark, as the table's
    # owner, lifts the guard for this one statement.
    sql_run(url, "ALTER TABLE payouts_payout DISABLE TRIGGER payouts_payout_append_only")
    sql_run(url, f"DELETE FROM payouts_payout WHERE {where}")
    sql_run(url, "ALTER TABLE payouts_payout ENABLE TRIGGER payouts_payout_append_only")
    m["naive"] = naive_run(tenth, delay)
    m["naive diff"] = differences(url, where)
    m["orders paid"] = sql_value(url, f"SELECT sum(order_count) FROM {REFERENCE_TABLE}")
    m["delivered"] = sql_value(url, "SELECT count(*) FROM orders_order WHERE status = 'delivered'")
    return report(args, m).finish()


def report(args: argparse.Namespace, m: dict[str, Any]) -> Report:
    expected = args.restaurants * WEEKS
    project, reference, rows = m["project"], m["reference"], m["rows"]
    rep = Report(
        name=NAME,
        title=f"1. payout catch-up: {args.restaurants:,} restaurants in 3 zones, {WEEKS} unpaid weeks",
        command="python -m bench.payouts",
        project="weekly-payouts job: run_claim_manual + runs_execute (claim, fence, batched INSERT ... SELECT)",
        reference="one hand-written INSERT ... SELECT (generate_series weeks, AT TIME ZONE, SUM per week)",
    )
    rep.add(
        Row("catch-up time", "s", project, reference, goal="<= 1.5 x reference", passed=project <= 1.5 * reference),
        Row("payout rows", "rows", rows["payouts_payout"], rows[REFERENCE_TABLE], None, f"{expected:,} each",
            rows["payouts_payout"] == rows[REFERENCE_TABLE] == expected),
        Row("rows differing (any business column)", "rows", m["diff"], None, None, "0",
            m["diff"] == 0 and m["status"] == "succeeded"),
        Row("naive ORM loop, 1/10 of restaurants", "s", m["naive"], None, None),
        Row("naive ORM loop x 10, vs reference", "s", m["naive"] * 10, reference),
        Row("naive rows differing (its 1/10)", "rows", m["naive diff"], None, None, "0", m["naive diff"] == 0),
    )  # fmt: skip
    rep.note(f"orders delivered {m['delivered']:,}, of which {m['orders paid']:,} in the four paid weeks")
    rep.note(f"the project's run ended '{m['status']}'; data generated in {m['generated']:.1f} s (not timed above)")
    rep.note(f"{args.rounds} rounds on a fresh ledger, reference then project; times are each side's faster round")
    rep.note("the naive loop runs after the project's rows for its restaurants are deleted, on the same warm data")
    return rep


if __name__ == "__main__":
    raise SystemExit(main())
