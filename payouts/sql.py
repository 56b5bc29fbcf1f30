"""The payout SQL, run: ``payouts.queries`` holds the statements (what they compute, and
why each clause is there); this module passes them their parameters and reads the rows
back. On SQLite the statements of the same names in ``payouts.queries_sqlite`` run
(``_queries`` picks the module), and no lock is taken."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from types import ModuleType
from typing import Any

from payouts import queries, queries_sqlite
from payouts.weeks import BusinessWeek
from tiffin.db import adapt, array, execute, fetch, json_instant, postgresql_only, queries_for_backend
from tiffin.money import CENT
from tiffin.tz import TZDATA_VERSION


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
    zone's first listed week is not paid (``payouts.queries``).

    ON CONFLICT DO NOTHING: a period paid by a concurrent writer is skipped rather than
    failing the batch (the fence makes that impossible for runs; the constraint stays).
    """
    if not weeks:
        return []
    params = _params(batch=batch, weeks=weeks, job_run_id=job_run_id, fence=fence, now=now)
    _batch_lock(params)
    return [row[0] for row in fetch(_queries().INSERT_DUE_PAYOUTS, params)]


@postgresql_only
def _batch_lock(params: dict[str, Any]) -> None:
    """``queries.LOCK_BATCH``. SQLite's IMMEDIATE transactions (``tiffin.env``) already hold
    its one write lock, so a delivery and a payout never interleave there."""
    execute(queries.LOCK_BATCH, params)


def payouts_select_due(*, batch: RestaurantBatch, weeks: Sequence[BusinessWeek]) -> list[DuePayout]:
    """What ``payouts_insert_due`` would write, without writing it (``--dry-run``)."""
    if not weeks:
        return []
    params = _params(batch=batch, weeks=weeks, job_run_id=None, fence=None, now=None)
    rows = fetch(_queries().SELECT_DUE_PAYOUTS, params)
    return sorted((_due_payout(row) for row in rows), key=lambda d: (d.period_start, d.restaurant_id))


def _queries() -> ModuleType:
    """The statements for this connection's database: ``payouts.queries`` on PostgreSQL,
    ``payouts.queries_sqlite`` (the same names) on SQLite."""
    return queries_for_backend(queries, queries_sqlite)


def _params(
    *,
    batch: RestaurantBatch,
    weeks: Sequence[BusinessWeek],
    job_run_id: int | None,
    fence: int | None,
    now: datetime | None,
) -> dict[str, Any]:
    return {
        "first_id": batch.first_id,
        "last_id": batch.last_id,
        "only": None if batch.only is None else array(batch.only),
        "weeks": json.dumps(_weeks_json(weeks)),
        "tzdata_version": TZDATA_VERSION,
        "job_run_id": job_run_id,
        "fence": fence,
        "now": None if now is None else adapt(now),
    }


def _weeks_json(weeks: Sequence[BusinessWeek]) -> list[dict[str, str]]:
    listed_from: dict[str, datetime] = {}
    for week in weeks:
        listed_from[week.timezone] = min(week.period_start, listed_from.get(week.timezone, week.period_start))
    return [
        {
            "zone": week.timezone,
            "week_start_local": week.week_start_local.isoformat(),
            "period_start": json_instant(week.period_start),
            "period_end": json_instant(week.period_end),
            "listed_from": json_instant(listed_from[week.timezone]),
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
