"""The payout SQL: one statement computes and writes the payouts of a batch of restaurants.

For every (restaurant, business week) pair that is finished, on or after the
restaurant's onboarding week and has no payout row yet, the statement sums the totals
of the restaurant's orders delivered inside the week's UTC bounds and inserts the
payout, a zero one when there were none. It is the same statement on PostgreSQL and
SQLite except for the money arithmetic and how each pair's orders are summed (below):

- PostgreSQL sums ``numeric`` exactly and ``ROUND(numeric, 2)`` rounds half away from
  zero, which for amounts that are never negative is half-up.
- SQLite stores decimals as floats, so the amounts are summed in whole cents (every
  order total has two decimals, so ``ROUND(total * 100)`` is exact) and the commission is
  rounded half-up in integer arithmetic: ``(cents * rate_in_ten_thousandths + 5000) /
  10000``. Dividing whole cents by 100.0 then gives the float SQLite itself would store
  for the decimal.

Indexes:

- ``order_delivered_by_restaurant`` (restaurant_id, delivered_at) INCLUDE (total) WHERE
  status = 'delivered': the orders of each pair are an index-only range scan (the count
  is of ``o.total``, which the index covers, not of ``o.id``, which it does not).
- ``payout_one_per_restaurant_week`` (restaurant_id, period_start): the NOT EXISTS
  probe (a range of at most two payouts: any payout overlapping the week, not only one
  starting with it, so a restaurant whose zone or onboarding changed after it was paid
  is never paid twice for the same hours) and the ON CONFLICT arbiter.
- the primary key of ``orders_restaurant`` for the batch's ``id BETWEEN first AND last``
  (a range, not a list of ids: with 2,500 ids in an IN list, sending and planning the
  list cost more than a tenth of the whole batch).

On PostgreSQL each pair sums its orders in a LATERAL subquery: one index-only range scan
feeding a plain aggregate per pair. The portable form, a LEFT JOIN of every order to its
pair and a GROUP BY over the result, first materialises all of a batch's orders (half a
million rows for 2,500 restaurants over four weeks) into a hash aggregate, which made
the payout catch-up benchmark (bench/payouts.py) about a third slower than the
LATERAL form. SQLite has no LATERAL, so it keeps the GROUP BY.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection

from payouts.weeks import BusinessWeek
from tiffin.db import adapt

CENT = Decimal("0.01")

# Per backend: the inner SELECT's money columns, then the outer SELECT's gross,
# commission and net computed from them.
_MONEY = {
    "postgresql": {
        "inner": "s.gross, ROUND(s.gross * r.commission_rate, 2) AS commission",
        "outer": "due.gross, due.commission, due.gross - due.commission",
    },
    "sqlite": {
        "inner": (
            "COALESCE(SUM(CAST(ROUND(o.total * 100) AS INTEGER)), 0) AS gross, "
            "(COALESCE(SUM(CAST(ROUND(o.total * 100) AS INTEGER)), 0) "
            "* CAST(ROUND(r.commission_rate * 10000) AS INTEGER) + 5000) / 10000 AS commission"
        ),
        "outer": "due.gross / 100.0, due.commission / 100.0, (due.gross - due.commission) / 100.0",
    },
}

_WEEKS = "WITH weeks (zone, week_start_local, period_start, period_end, overlap_from) AS (VALUES {weeks})"
# No business week lasts longer than this (169 h in an autumn DST week), so a payout that
# overlaps a week starts after the week's start minus it: it bounds the overlap probe.
LONGEST_WEEK = timedelta(hours=169)

# The due (restaurant, week) pairs of the batch: finished weeks from the onboarding week
# on that have no payout yet.
_DUE = """
    FROM orders_restaurant r
    JOIN weeks w ON w.zone = r.timezone AND w.period_end > r.onboarded_at
    {orders}
    WHERE r.id BETWEEN %s AND %s{{only}} AND r.is_active
      AND NOT EXISTS (
          SELECT 1 FROM payouts_payout p
          WHERE p.restaurant_id = r.id AND p.period_start > w.overlap_from
            AND p.period_start < w.period_end AND p.period_end > w.period_start
      )
"""
_IN_WEEK = (
    "o.restaurant_id = r.id AND o.status = 'delivered' "
    "AND o.delivered_at >= w.period_start AND o.delivered_at < w.period_end"
)

# One row per due pair, with its orders' sum and count (see the module doc for why two forms).
_PAIRS = {
    "postgresql": "SELECT r.id AS restaurant_id, w.week_start_local, w.period_start, w.period_end, "
    "{inner}, s.order_count"
    + _DUE.format(
        orders="CROSS JOIN LATERAL (SELECT COALESCE(SUM(o.total), 0) AS gross, COUNT(o.total) AS order_count "
        f"FROM orders_order o WHERE {_IN_WEEK}) s"
    ),
    "sqlite": "SELECT r.id AS restaurant_id, w.week_start_local, w.period_start, w.period_end, "
    "{inner}, COUNT(o.total) AS order_count"
    + _DUE.format(orders=f"LEFT JOIN orders_order o ON {_IN_WEEK}")
    + " GROUP BY r.id, r.commission_rate, w.week_start_local, w.period_start, w.period_end",
}

_COLUMNS = "due.restaurant_id, due.week_start_local, due.period_start, due.period_end, {outer}, due.order_count"

_SELECT = _WEEKS + " SELECT " + _COLUMNS + " FROM ({pairs}) due ORDER BY due.week_start_local, due.restaurant_id"

# The WITH goes inside the INSERT: Python's sqlite3 reports a row count only for a
# statement that starts with INSERT. WHERE true: SQLite needs it to tell the upsert's
# ON CONFLICT from a join's ON.
_INSERT = (
    """
INSERT INTO payouts_payout (
    restaurant_id, week_start_local, period_start, period_end, gross, commission, net, order_count,
    job_run_id, fence, created_at
)
"""
    + _WEEKS
    + " SELECT "
    + _COLUMNS
    + """, %s, %s, %s FROM ({pairs}) due
WHERE true
ON CONFLICT (restaurant_id, period_start) DO NOTHING
"""
)


@dataclass(frozen=True)
class RestaurantBatch:
    """The restaurants of one batch: every active one with an id in [first_id, last_id],
    or, for a catch-up restricted to some restaurants, only the ids in ``only``."""

    first_id: int
    last_id: int
    only: tuple[int, ...] | None = None

    def params(self) -> list[int]:
        return [self.first_id, self.last_id, *(self.only or ())]


@dataclass(frozen=True)
class DuePayout:
    restaurant_id: int
    week_start_local: date
    period_start: datetime
    period_end: datetime
    gross: Decimal
    commission: Decimal
    net: Decimal
    order_count: int


def payouts_insert_due(
    *, batch: RestaurantBatch, weeks: Sequence[BusinessWeek], job_run_id: int | None, fence: int, now: datetime
) -> int:
    """Write the due payouts of the batch's restaurants over ``weeks``; return how many rows.

    INSERT ... SELECT ... ON CONFLICT DO NOTHING: a pair paid by a concurrent writer
    since the NOT EXISTS was evaluated is skipped rather than failing the batch.
    """
    if not weeks:
        return 0
    sql = _render(_INSERT, batch, weeks)
    params = [*_week_params(weeks), job_run_id, fence, adapt(now), *batch.params()]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return max(int(cursor.rowcount), 0)


def payouts_select_due(*, batch: RestaurantBatch, weeks: Sequence[BusinessWeek]) -> list[DuePayout]:
    """What ``payouts_insert_due`` would write, without writing it (``--dry-run``)."""
    if not weeks:
        return []
    sql = _render(_SELECT, batch, weeks)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*_week_params(weeks), *batch.params()])
        return [_due_payout(row) for row in cursor.fetchall()]


def _render(template: str, batch: RestaurantBatch, weeks: Sequence[BusinessWeek]) -> str:
    vendor = "postgresql" if connection.vendor == "postgresql" else "sqlite"
    only = f" AND r.id IN ({', '.join(['%s'] * len(batch.only))})" if batch.only is not None else ""
    return template.format(
        weeks=", ".join(["(%s, %s, %s, %s, %s)"] * len(weeks)),
        pairs=_PAIRS[vendor].format(inner=_MONEY[vendor]["inner"], only=only),
        outer=_MONEY[vendor]["outer"],
    )


def _week_params(weeks: Sequence[BusinessWeek]) -> list[Any]:
    params: list[Any] = []
    for week in weeks:
        params += [
            week.timezone,
            adapt(week.week_start_local),
            adapt(week.period_start),
            adapt(week.period_end),
            adapt(week.period_start - LONGEST_WEEK),
        ]
    return params


def _due_payout(row: tuple[Any, ...]) -> DuePayout:
    restaurant_id, week_start, start, end, gross, commission, net, count = row
    return DuePayout(
        restaurant_id=restaurant_id,
        week_start_local=_date(week_start),
        period_start=_datetime(start),
        period_end=_datetime(end),
        gross=_money(gross),
        commission=_money(commission),
        net=_money(net),
        order_count=count,
    )


def _money(value: Any) -> Decimal:
    # PostgreSQL returns Decimal; SQLite a float that is the nearest double to a value in
    # whole cents, whose shortest repr is that value.
    return (value if isinstance(value, Decimal) else Decimal(repr(float(value)))).quantize(CENT)


def _date(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(value)


def _datetime(value: Any) -> datetime:
    # SQLite hands back the naive UTC text the ORM stores.
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(value).replace(tzinfo=UTC)
