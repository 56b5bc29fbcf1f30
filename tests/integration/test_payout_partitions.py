"""The ledger's partitions (PostgreSQL; payouts/partitions.py, migration 0008): a payout
goes to its year's partition, years are made a quarter ahead by the payout pass,
and a split that cannot be made leaves every payout written and readable."""

from __future__ import annotations

import itertools
import logging
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection

from payouts import partitions
from payouts.models import Payout
from payouts.partitions import (
    AHEAD,
    FUTURE,
    HISTORY,
    PartitionError,
    history_shorten,
    partitions_ensure,
    year_after,
    year_name,
    year_start,
)
from payouts.services import payouts_pay_due
from tests.engine import pay
from tests.fences import TokenOnly
from tests.locks import held_in_thread

pytestmark = pytest.mark.postgres


def layout() -> list[tuple[str, str, str]]:
    """Every partition with its lower and upper bound as PostgreSQL shows them, in order."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, b[1], b[2] FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid, "
            "regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\((.*)\\) TO \\((.*)\\)') b "
            "WHERE i.inhparent = 'payouts_payout'::regclass"
        )
        rows = cursor.fetchall()
    return sorted(rows, key=lambda row: (row[0] != HISTORY, row[0] == FUTURE, row[0]))


def partition_of(payout: Payout) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM payouts_payout WHERE id = %s", [payout.id])
        return str(cursor.fetchone()[0])


def test_years_are_utc_years():
    # 23:30 on 31 December in New York is already next year in UTC.
    new_york_eve = datetime(2027, 12, 31, 23, 30, tzinfo=ZoneInfo("America/New_York"))
    assert year_start(new_york_eve) == datetime(2028, 1, 1, tzinfo=UTC)
    assert year_after(datetime(2027, 1, 1, tzinfo=UTC)) == datetime(2028, 1, 1, tzinfo=UTC)
    assert year_name(datetime(2027, 1, 1, tzinfo=UTC)) == "payouts_payout_2027"


@pytest.mark.django_db
def test_the_migrated_table_is_the_history_then_years_then_the_future():
    bounds = layout()
    assert (bounds[0][0], bounds[0][1]) == (HISTORY, "MINVALUE")
    assert (bounds[-1][0], bounds[-1][2]) == (FUTURE, "MAXVALUE")
    # Each partition starts where the one before it ends: no gap, no overlap.
    for before, after in itertools.pairwise(bounds):
        assert before[2] == after[1]
    years = [name for name, _, _ in bounds[1:-1]]
    assert year_name(year_start(datetime.now(UTC))) in years


@pytest.mark.django_db
def test_a_pass_years_on_makes_the_years_through_a_quarter_ahead_and_pays_each_week_into_its_year(
    restaurant_factory: Any,
):
    # Monday 2029-12-17: three weeks start in 2029 (the last on Monday 31 December), one in 2030.
    restaurant = restaurant_factory(timezone="UTC", onboarded_at=datetime(2029, 12, 17, 9, tzinfo=UTC))
    as_of = datetime(2030, 1, 14, 2, tzinfo=UTC)
    run = pay(as_of)
    payouts = list(Payout.objects.filter(restaurant=restaurant).order_by("period_start"))
    assert [p.job_run_id for p in payouts] == [run.id] * 4
    assert [partition_of(p) for p in payouts] == ["payouts_payout_2029"] * 3 + ["payouts_payout_2030"]
    names = [name for name, _, _ in layout()]
    clock = as_of + timedelta(minutes=5)  # pay()'s clock
    assert year_name(year_start(clock + AHEAD)) in names
    assert partitions_ensure(now=clock) == []  # made once


@pytest.mark.django_db
def test_a_future_partition_that_holds_a_payout_is_not_split_and_the_payout_stays(
    restaurant_factory: Any, caplog: pytest.LogCaptureFixture
):
    far = datetime(2090, 1, 2, tzinfo=UTC)
    restaurant = restaurant_factory(timezone="UTC", onboarded_at=far - timedelta(days=30))
    payout = a_payout(restaurant, far)
    assert partition_of(payout) == FUTURE
    before = layout()
    with caplog.at_level(logging.WARNING, logger="payouts.partitions"):
        assert partitions_ensure(now=far) == []
    assert layout() == before
    assert "holds payouts" in caplog.text
    assert partition_of(payout) == FUTURE


@pytest.mark.django_db(transaction=True)
def test_a_split_that_cannot_lock_the_ledger_in_time_leaves_it_to_the_next_pass(caplog: pytest.LogCaptureFixture):
    def reader() -> None:  # a long read of the ledger (an admin page, the ledger check)
        list(Payout.objects.all()[:1])

    far = datetime.now(UTC) + timedelta(days=800)
    with held_in_thread(reader):
        before = layout()
        with caplog.at_level(logging.WARNING, logger="payouts.partitions"):
            assert partitions_ensure(now=far) == []
        assert f"not locked within {partitions.LOCK_TIMEOUT}" in caplog.text
        assert layout() == before
    assert partitions_ensure(now=far)  # once the reader is gone, the next pass splits


@pytest.mark.django_db
def test_the_latest_payout_probe_reads_the_partitions_newest_first_and_stops():
    # An ordered Append under the LIMIT: the probe stops at the newest partition with a
    # row. A Merge Append (what a DEFAULT partition forces) would descend every one.
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (COSTS OFF) SELECT p.period_end FROM payouts_payout p WHERE p.restaurant_id = 1 "
            "ORDER BY p.period_start DESC LIMIT 1"
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Merge Append" not in plan
    assert "Append" in plan and "Index Scan Backward" in plan


def a_payout(restaurant: Any, start: datetime) -> Payout:
    return Payout.objects.create(
        restaurant=restaurant, period_start=start, period_end=start + timedelta(days=7), week_start_local=start.date(),
        gross=0, commission=0, net=0, order_count=0, commission_rate=restaurant.commission_rate,
        tzdata_version="test", created_at=start,
    )  # fmt: skip


@pytest.mark.django_db
def test_an_empty_history_is_shortened_into_years_for_a_backfill_and_a_held_one_is_not(restaurant_factory: Any):
    restaurant = restaurant_factory(timezone="UTC", onboarded_at=datetime(2024, 1, 1, tzinfo=UTC))
    history_end = layout()[0][2]
    made = history_shorten(since=datetime(2024, 5, 20, tzinfo=UTC))
    assert made[0] == "payouts_payout_2024" and len(made) >= 2
    assert layout()[0][2] == "'2024-01-01 00:00:00+00'"
    assert layout()[len(made)][2] == history_end  # the last year made ends where the history did
    assert partition_of(a_payout(restaurant, datetime(2024, 6, 3, tzinfo=UTC))) == "payouts_payout_2024"
    old = a_payout(restaurant, datetime(2023, 6, 5, tzinfo=UTC))
    assert partition_of(old) == HISTORY
    before = layout()
    with pytest.raises(PartitionError, match="holds payouts from 2023-06-05"):
        history_shorten(since=datetime(2022, 1, 1, tzinfo=UTC))
    assert layout() == before and partition_of(old) == HISTORY


@pytest.mark.django_db
def test_the_pass_probes_and_writes_with_jit_off(restaurant_factory: Any):
    # Costed by the partitions they name, the open-ledger probe and the batches went past
    # jit_above_cost: JIT compiled the probe for 60 ms that ran for 2 (bench.payouts).
    from django.test.utils import CaptureQueriesContext

    for _ in range(3):
        restaurant_factory(timezone="UTC", onboarded_at=datetime(2029, 12, 17, 9, tzinfo=UTC))
    now = datetime(2030, 1, 14, 2, 5, tzinfo=UTC)
    with CaptureQueriesContext(connection) as captured:
        payouts_pay_due(
            as_of=datetime(2030, 1, 14, 2, tzinfo=UTC), run=TokenOnly(fence=1, now=now), now=now, batch_size=1,
        )  # fmt: skip
    statements = [q["sql"] for q in captured.captured_queries]
    probe = next(i for i, sql in enumerate(statements) if sql.startswith('SELECT "orders_restaurant"."id"'))
    batches = [i for i, sql in enumerate(statements) if sql.lstrip().startswith("INSERT INTO payouts_payout")]
    assert len(batches) == 3 and Payout.objects.count() == 12
    # Each in a transaction (a savepoint here) that turned JIT off before it.
    for at in [probe, *batches]:
        began = max(i for i in range(at) if statements[i].startswith("SAVEPOINT"))
        assert "SET LOCAL jit = off" in statements[began:at], statements[began : at + 1]
