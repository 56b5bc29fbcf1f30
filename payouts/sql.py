"""The payout SQL: one statement computes and writes the payouts of a batch of restaurants.

Each restaurant's payouts are one contiguous sequence from its onboarding week. The
statement continues it: for every restaurant of the batch whose ledger is open, the
next payout starts exactly where its last one ended (``paid_through``; the start of its
onboarding week when it has none), and each due payout ends at the next local Monday
00:00 of the restaurant's current zone, for every such Monday finished as of the run.
Only the first of them can be shorter than a week, after a zone change or a tz database
upgrade moved the boundaries; no hour is ever left out or paid twice. A period with no
orders gets a zero payout. ``weeks`` (a JSON list, computed in Python by
``payouts.weeks`` for the zones the batch uses) holds the candidate weeks per zone, each
with ``listed_from``, the start of its zone's first listed week.

- A restaurant is paid only if its zone's weeks reach back to where its ledger continues
  (``paid_through``, or its onboarding): a list that starts later would leave the hours
  between unpaid for good, so such a restaurant is left out, and the caller, told which
  restaurants were paid (the INSERT returns their ids, one per row), pays it from a list
  that reaches back to it. That lets the weekly run pass just the recent weeks and probe
  each ledger once, here.
- A ledger is open while the restaurant is active, and after its deactivation until the
  week it was deactivated in is paid (a period is due only if it starts before
  ``deactivated_at``).
- The commission rate is the restaurant's latest ``CommissionRateChange`` at or before
  the period's start, else its onboarding rate: a week paid late pays what it would
  have on time.
- Money: PostgreSQL sums ``numeric`` exactly and ``ROUND(numeric, 2)`` rounds half away
  from zero, which for amounts that are never negative is half-up. SQLite stores decimals
  as floats, so it sums whole cents (every total has two decimals, so ``ROUND(total *
  100)`` is exact) and rounds the commission half-up in integer arithmetic, ``(cents *
  rate_in_ten_thousandths + 5000) / 10000``; dividing by 100.0 gives the float SQLite
  itself would store for the decimal.

Indexes:

- ``order_delivered_by_restaurant`` (restaurant_id, delivered_at) INCLUDE (total) WHERE
  status = 'delivered': each period's orders are an index-only range scan (counting
  ``o.total``, which the index covers, not ``o.id``).
- ``payout_one_per_restaurant_week`` (restaurant_id, period_start): ``paid_through`` is
  the newest row of that index per restaurant, and the ON CONFLICT arbiter.
- ``rate_change_one_per_instant`` (restaurant_id, effective_from): the rate probe.
- the primary key of ``orders_restaurant`` for ``id BETWEEN first_id AND last_id`` (a
  range, not a list of 2,500 ids to send and plan).

On PostgreSQL each period sums its orders in a LATERAL subquery: one index-only range
scan feeding a plain aggregate per period. SQLite has no LATERAL and joins every order
to its period, then groups (on PostgreSQL that form materialises all of a batch's orders
into a hash aggregate, which is slower).

There is one SELECT per backend; the INSERT writes exactly what it returns, and returns
the restaurant id of every row it wrote. Parameters
are named: ``first_id``, ``last_id``, ``only`` (the ids of a restricted catch-up, or
NULL), ``weeks``, ``tzdata_version``, ``job_run_id``, ``fence``, ``now``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection

from payouts.weeks import BusinessWeek
from tiffin.db import adapt, execute, fetch
from tiffin.money import CENT
from tiffin.tz import TZDATA_VERSION

# The payouts due for one batch of restaurants, with every column the INSERT writes:
# periods (ledger x weeks), then each period's rate, then its orders. The two OFFSET 0
# keep PostgreSQL from flattening the subqueries: flattened, it re-ran the paid_through
# probe in every expression that names it (seven per restaurant) and the rate lookup in
# each of its three uses (docs/benchmark-history.md); kept, each is computed once per row.
_DUE_POSTGRESQL = """
SELECT p.restaurant_id, p.week_start_local, p.period_start, p.period_end,
       s.gross, ROUND(s.gross * p.rate, 2), s.gross - ROUND(s.gross * p.rate, 2), s.order_count,
       p.rate, %(tzdata_version)s::text, %(job_run_id)s::bigint, %(fence)s::bigint, %(now)s::timestamptz
FROM (
    SELECT periods.*,
           COALESCE((SELECT c.rate FROM orders_commissionratechange c
                     WHERE c.restaurant_id = periods.restaurant_id AND c.effective_from <= periods.period_start
                     ORDER BY c.effective_from DESC LIMIT 1), periods.onboarding_rate) AS rate
    FROM (
        SELECT l.id AS restaurant_id, w.week_start_local, w.period_end, l.commission_rate AS onboarding_rate,
               GREATEST(w.period_start, l.paid_through) AS period_start
        FROM (
            SELECT r.id, r.timezone, r.onboarded_at, r.deactivated_at, r.commission_rate,
                   (SELECT p.period_end FROM payouts_payout p WHERE p.restaurant_id = r.id
                    ORDER BY p.period_start DESC LIMIT 1) AS paid_through
            FROM orders_restaurant r
            WHERE r.id BETWEEN %(first_id)s AND %(last_id)s
              AND (%(only)s::bigint[] IS NULL OR r.id = ANY(%(only)s::bigint[]))
            OFFSET 0
        ) l
        JOIN jsonb_to_recordset(%(weeks)s::jsonb)
             AS w (zone text, week_start_local date, period_start timestamptz, period_end timestamptz,
                   listed_from timestamptz)
          ON w.zone = l.timezone
        WHERE w.period_end > COALESCE(l.paid_through, l.onboarded_at)
          AND COALESCE(l.paid_through, l.onboarded_at) >= w.listed_from
          AND (l.deactivated_at IS NULL OR GREATEST(w.period_start, l.paid_through) < l.deactivated_at)
    ) periods
    OFFSET 0
) p
CROSS JOIN LATERAL (
    SELECT COALESCE(SUM(o.total), 0) AS gross, COUNT(o.total) AS order_count
    FROM orders_order o
    WHERE o.restaurant_id = p.restaurant_id AND o.status = 'delivered'
      AND o.delivered_at >= p.period_start AND o.delivered_at < p.period_end
) s
"""

# The same for SQLite: money in whole cents, GROUP BY instead of LATERAL, and MAX(a, b)
# for GREATEST (NULL if either is, hence the COALESCE around paid_through).
_DUE_SQLITE = """
SELECT due.restaurant_id, due.week_start_local, due.period_start, due.period_end,
       due.gross / 100.0, due.commission / 100.0, (due.gross - due.commission) / 100.0, due.order_count,
       due.rate, %(tzdata_version)s, %(job_run_id)s, %(fence)s, %(now)s
FROM (
    SELECT p.restaurant_id, p.week_start_local, p.period_start, p.period_end, p.rate,
           COALESCE(SUM(CAST(ROUND(o.total * 100) AS INTEGER)), 0) AS gross,
           (COALESCE(SUM(CAST(ROUND(o.total * 100) AS INTEGER)), 0)
            * CAST(ROUND(p.rate * 10000) AS INTEGER) + 5000) / 10000 AS commission,
           COUNT(o.total) AS order_count
    FROM (
        SELECT periods.*,
               COALESCE((SELECT c.rate FROM orders_commissionratechange c
                         WHERE c.restaurant_id = periods.restaurant_id AND c.effective_from <= periods.period_start
                         ORDER BY c.effective_from DESC LIMIT 1), periods.onboarding_rate) AS rate
        FROM (
            SELECT l.id AS restaurant_id, w.week_start_local, w.period_end, l.commission_rate AS onboarding_rate,
                   MAX(w.period_start, COALESCE(l.paid_through, w.period_start)) AS period_start
            FROM (
                SELECT r.id, r.timezone, r.onboarded_at, r.deactivated_at, r.commission_rate,
                       (SELECT p.period_end FROM payouts_payout p WHERE p.restaurant_id = r.id
                        ORDER BY p.period_start DESC LIMIT 1) AS paid_through
                FROM orders_restaurant r
                WHERE r.id BETWEEN %(first_id)s AND %(last_id)s
                  AND (%(only)s IS NULL OR r.id IN (SELECT value FROM json_each(%(only)s)))
            ) l
            JOIN (
                SELECT json_extract(value, '$.zone') AS zone,
                       json_extract(value, '$.week_start_local') AS week_start_local,
                       json_extract(value, '$.period_start') AS period_start,
                       json_extract(value, '$.period_end') AS period_end,
                       json_extract(value, '$.listed_from') AS listed_from
                FROM json_each(%(weeks)s)
            ) w ON w.zone = l.timezone
            WHERE w.period_end > COALESCE(l.paid_through, l.onboarded_at)
              AND COALESCE(l.paid_through, l.onboarded_at) >= w.listed_from
              AND (l.deactivated_at IS NULL
                   OR MAX(w.period_start, COALESCE(l.paid_through, w.period_start)) < l.deactivated_at)
        ) periods
    ) p
    LEFT JOIN orders_order o
      ON o.restaurant_id = p.restaurant_id AND o.status = 'delivered'
     AND o.delivered_at >= p.period_start AND o.delivered_at < p.period_end
    GROUP BY p.restaurant_id, p.week_start_local, p.period_start, p.period_end, p.rate
) due
"""

_DUE = {"postgresql": _DUE_POSTGRESQL, "sqlite": _DUE_SQLITE}

# Write what the SELECT returns, and return whom each row pays. The INSERT comes first
# because Python's sqlite3 reports a row count only for a statement that starts with
# INSERT; WHERE true tells SQLite's parser the upsert's ON CONFLICT from a join's ON.
_INSERT_INTO = """
INSERT INTO payouts_payout (
    restaurant_id, week_start_local, period_start, period_end, gross, commission, net, order_count,
    commission_rate, tzdata_version, job_run_id, fence, created_at
)
SELECT * FROM (
"""
_ON_CONFLICT = """
) due WHERE true
ON CONFLICT (restaurant_id, period_start) DO NOTHING
RETURNING restaurant_id
"""
_INSERT = {vendor: _INSERT_INTO + due + _ON_CONFLICT for vendor, due in _DUE.items()}

# Lock the batch's restaurants before reading their orders (PostgreSQL). A delivery
# takes FOR SHARE on its restaurant before it checks that the restaurant is not paid
# past the delivery (the orders_payout_guard trigger), so of the two whichever comes
# second waits: the payout's INSERT, a later statement with a new snapshot, then sees the
# committed delivery, or the delivery sees the committed payouts and is refused. NO KEY
# UPDATE does not block the foreign-key checks of orders being placed.
_LOCK_POSTGRESQL = """
SELECT id FROM orders_restaurant
WHERE id BETWEEN %(first_id)s AND %(last_id)s AND (%(only)s::bigint[] IS NULL OR id = ANY(%(only)s::bigint[]))
ORDER BY id FOR NO KEY UPDATE
"""


@dataclass(frozen=True)
class RestaurantBatch:
    """The restaurants of one batch: every one with an id in [first_id, last_id], or,
    for a catch-up restricted to some restaurants, only the ids in ``only``."""

    first_id: int
    last_id: int
    only: tuple[int, ...] | None = None


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
    commission_rate: Decimal


def payouts_insert_due(
    *, batch: RestaurantBatch, weeks: Sequence[BusinessWeek], job_run_id: int | None, fence: int, now: datetime
) -> list[int]:
    """Write the due payouts of the batch's restaurants over ``weeks``; return the
    restaurant id of each row written. A restaurant whose ledger continues before its
    zone's first listed week is not paid (module docstring).

    ON CONFLICT DO NOTHING: a period paid by a concurrent writer is skipped rather than
    failing the batch (the fence makes that impossible for runs; the constraint stays).
    """
    if not weeks:
        return []
    vendor = _vendor()
    params = _params(batch=batch, weeks=weeks, job_run_id=job_run_id, fence=fence, now=now)
    if vendor == "postgresql":
        execute(_LOCK_POSTGRESQL, params)
    return [row[0] for row in fetch(_INSERT[vendor], params)]


def payouts_select_due(*, batch: RestaurantBatch, weeks: Sequence[BusinessWeek]) -> list[DuePayout]:
    """What ``payouts_insert_due`` would write, without writing it (``--dry-run``)."""
    if not weeks:
        return []
    params = _params(batch=batch, weeks=weeks, job_run_id=None, fence=None, now=None)
    rows = fetch(_DUE[_vendor()], params)
    return sorted((_due_payout(row) for row in rows), key=lambda d: (d.period_start, d.restaurant_id))


def _vendor() -> str:
    return "postgresql" if connection.vendor == "postgresql" else "sqlite"


def _params(
    *,
    batch: RestaurantBatch,
    weeks: Sequence[BusinessWeek],
    job_run_id: int | None,
    fence: int | None,
    now: datetime | None,
) -> dict[str, Any]:
    only: Any = None
    if batch.only is not None:
        only = list(batch.only) if _vendor() == "postgresql" else json.dumps(list(batch.only))
    return {
        "first_id": batch.first_id,
        "last_id": batch.last_id,
        "only": only,
        "weeks": json.dumps(_weeks_json(weeks)),
        "tzdata_version": TZDATA_VERSION,
        "job_run_id": job_run_id,
        "fence": fence,
        "now": None if now is None else adapt(now),
    }


def _weeks_json(weeks: Sequence[BusinessWeek]) -> list[dict[str, str]]:
    # Instants in the form each backend compares with its stored values: ISO with offset
    # for PostgreSQL's timestamptz, the ORM's naive UTC text for SQLite.
    def instant(moment: datetime) -> str:
        return moment.isoformat() if _vendor() == "postgresql" else str(adapt(moment))

    listed_from: dict[str, datetime] = {}
    for week in weeks:
        listed_from[week.timezone] = min(week.period_start, listed_from.get(week.timezone, week.period_start))
    return [
        {
            "zone": week.timezone,
            "week_start_local": week.week_start_local.isoformat(),
            "period_start": instant(week.period_start),
            "period_end": instant(week.period_end),
            "listed_from": instant(listed_from[week.timezone]),
        }
        for week in weeks
    ]


def _due_payout(row: tuple[Any, ...]) -> DuePayout:
    restaurant_id, week_start, start, end, gross, commission, net, count, rate = row[:9]
    return DuePayout(
        restaurant_id=restaurant_id,
        week_start_local=_date(week_start),
        period_start=_datetime(start),
        period_end=_datetime(end),
        gross=_money(gross),
        commission=_money(commission),
        net=_money(net),
        order_count=count,
        commission_rate=_decimal(rate).quantize(Decimal("0.0001")),
    )


def _decimal(value: Any) -> Decimal:
    # PostgreSQL returns Decimal; SQLite a float that is the nearest double to a short
    # decimal, whose shortest repr is that decimal.
    return value if isinstance(value, Decimal) else Decimal(repr(float(value)))


def _money(value: Any) -> Decimal:
    return _decimal(value).quantize(CENT)


def _date(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(value)


def _datetime(value: Any) -> datetime:
    # SQLite hands back the naive UTC text the ORM stores.
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(value).replace(tzinfo=UTC)
