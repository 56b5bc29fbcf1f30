"""The ledger's partitions (PostgreSQL): ``payouts_payout`` by RANGE of ``period_start``,
one partition a year.

Why: the weekly run writes one payout per restaurant, and each goes into the unique
index (restaurant_id, period_start) beside that restaurant's earlier payouts. In one
table the run's cost grows with the ledger for years, as those pages are read, written
and logged whole after each checkpoint (docs/benchmark-history.md). In a year's
partition the week's rows share the pages of at most 52 weeks of history, however old
the ledger is.
A year, not a quarter or a month: every statement that cannot prune (the probes below)
opens each partition, so their number should grow slowly.

The layout, oldest first, every bound a UTC instant:

- ``payouts_payout_history``: everything before the first year (the table as it was
  before migration 0008, or on a new database the periods before the year it was
  migrated in);
- ``payouts_payout_<year>``: one per calendar year in UTC;
- ``payouts_payout_future``: from the end of the last year to MAXVALUE, so a payout
  dated past the partitions made so far is still written, never refused.

No DEFAULT partition: with one, PostgreSQL cannot read the partitions in order, and
"the restaurant's latest payout" (``ORDER BY period_start DESC LIMIT 1``: the weekly
run's ``paid_through``, the delivery and rate-change guards) would descend every
partition's index instead of stopping at the newest one that has a row.

``partitions_ensure`` keeps years made through ``AHEAD`` past ``now`` by splitting the
empty future partition; the payout pass calls it before it writes, so next year's
partition exists from October on. The split detaches the future partition, which takes
ACCESS EXCLUSIVE on ``payouts_payout`` for a few milliseconds; it waits at most
``LOCK_TIMEOUT`` for that (a long admin query, the hourly ledger check) and otherwise
leaves the split to the next pass, a week later. Nothing depends on it for correctness:
payouts of a year not split off land in the future partition and are as right there;
only the bound on the weekly run's cost waits. A future partition that holds rows (a
payout dated past the horizon, which only a test or a hand-written row makes) is not
split, and each pass says so in the log.

SQLite has one table, as before: ``partitions_ensure`` does nothing there.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.db import OperationalError, connection, transaction
from django.db.backends.utils import CursorWrapper

logger = logging.getLogger(__name__)


class PartitionError(Exception):
    """A change of the partitions that would have to move payouts."""


TABLE = "payouts_payout"
HISTORY = f"{TABLE}_history"
FUTURE = f"{TABLE}_future"
# The unique key; each partition's index of it is named <partition>_<this>, so that a
# duplicate's error names it still.
UNIQUE = "payout_one_per_restaurant_week"
# How far past now years are made: a quarter, so a year's partition is made by the
# weekly passes of the quarter before it, each of them a chance to retry.
AHEAD = timedelta(days=92)
# How long a split waits for the lock before it leaves the split to the next pass.
LOCK_TIMEOUT = "1s"

_HISTORY_END = f"""
SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz
FROM pg_class c WHERE c.oid = to_regclass('{HISTORY}')
"""
_FUTURE_START = f"""
SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\)'))[1]::timestamptz
FROM pg_class c WHERE c.oid = to_regclass('{FUTURE}')
"""


def year_start(instant: datetime) -> datetime:
    """The start (UTC midnight, 1 January) of the calendar year in UTC that holds ``instant``."""
    return datetime(instant.astimezone(UTC).year, 1, 1, tzinfo=UTC)


def year_after(start: datetime) -> datetime:
    """The start of the year after the one starting at ``start``."""
    return datetime(start.year + 1, 1, 1, tzinfo=UTC)


def year_name(start: datetime) -> str:
    """``payouts_payout_2027`` for the year starting 2027-01-01."""
    return f"{TABLE}_{start.year}"


def bound(instant: datetime) -> str:
    """``instant`` as a partition bound: a literal, as DDL takes no parameters."""
    return f"'{instant.astimezone(UTC).isoformat()}'"


def partitions_ensure(*, now: datetime) -> list[str]:
    """Make the years through ``now + AHEAD`` that do not exist yet; return their names
    (none: nothing to do, not PostgreSQL, the lock not had in time, or rows in the future
    partition). Runs in a transaction of its own; inside the caller's, the lock of a split
    is held until that one ends."""
    if connection.vendor != "postgresql":  # seam: partitioning is PostgreSQL's
        return []
    with connection.cursor() as cursor:
        cursor.execute(_FUTURE_START)
        future = cursor.fetchone()
    # None: the table is not partitioned (yet: code deployed before migration 0008 ran).
    if future is None or future[0] > now + AHEAD:
        return []  # the common case: one catalog read, no lock
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
            return future_split(cursor, through=now + AHEAD)
    except OperationalError as error:
        if getattr(error.__cause__, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        logger.warning("payout partitions: %s not locked within %s; the next pass splits it", TABLE, LOCK_TIMEOUT)
        return []


def history_shorten(*, since: datetime) -> list[str]:
    """End the history partition at the start of ``since``'s year, with years from there
    to where it ended; return the years made. For a database about to be loaded with past
    payouts (a backfill; the benchmark's two years of ledger), so they go into years as
    the weekly runs' would have. Refused (PartitionError) if the history holds a payout
    from that year on: its rows are never moved. PostgreSQL only."""
    start = year_start(since)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(_HISTORY_END)
        (end,) = cursor.fetchone()
        if start >= end:
            return []
        cursor.execute(f"SELECT min(period_start) FROM {HISTORY} WHERE period_start >= %s", [start])
        (held,) = cursor.fetchone()
        if held is not None:
            raise PartitionError(
                f"{HISTORY} holds payouts from {held.isoformat()}: it cannot end at {start.isoformat()}"
            )
        cursor.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {HISTORY}")
        history_attach(cursor, end=start)
        return _years_create(cursor, start=start, before=end)


def history_attach(cursor: CursorWrapper, *, end: datetime) -> None:
    """Attach the (detached) history table as the partition of everything before ``end``,
    its rows checked against the bound by a constraint first, so ATTACH need not scan for
    it again. The caller holds ACCESS EXCLUSIVE on the table (migration 0008 does too)."""
    cursor.execute(f"ALTER TABLE {HISTORY} ADD CONSTRAINT {HISTORY}_bound CHECK (period_start < {bound(end)})")
    cursor.execute(f"ALTER TABLE {TABLE} ATTACH PARTITION {HISTORY} FOR VALUES FROM (MINVALUE) TO ({bound(end)})")
    cursor.execute(f"ALTER TABLE {HISTORY} DROP CONSTRAINT {HISTORY}_bound")


def _years_create(cursor: CursorWrapper, *, start: datetime, before: datetime) -> list[str]:
    """Make one partition per year from ``start`` (a year's start) to ``before``; return
    their names."""
    made = []
    while start < before:
        partition_create(cursor, year_name(start), start=start, end=year_after(start))
        made.append(year_name(start))
        start = year_after(start)
    return made


def partition_create(cursor: CursorWrapper, name: str, *, start: datetime, end: datetime | None) -> None:
    """Make partition ``name`` for [start, end) (end None: MAXVALUE), its unique key's index
    named after the key."""
    upper = "MAXVALUE" if end is None else bound(end)
    cursor.execute(f"CREATE TABLE {name} PARTITION OF {TABLE} FOR VALUES FROM ({bound(start)}) TO ({upper})")
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_index x ON x.indexrelid = c.oid WHERE i.inhparent = %s::regclass AND x.indrelid = %s::regclass",
        [UNIQUE, name],
    )
    cursor.execute(f"ALTER INDEX {cursor.fetchone()[0]} RENAME TO {name}_{UNIQUE}")


def future_split(cursor: CursorWrapper, *, through: datetime) -> list[str]:
    """Split years off the future partition until it starts after ``through``; return the
    years made. The caller holds ACCESS EXCLUSIVE on the table (migration 0008
    does too). Also the migration's: it must not change what it does."""
    cursor.execute(_FUTURE_START)
    future = cursor.fetchone()
    if future is None or future[0] > through:
        return []
    start: datetime = future[0]
    cursor.execute(f"SELECT EXISTS (SELECT FROM {FUTURE})")
    if cursor.fetchone()[0]:
        logger.warning(
            "payout partitions: %s holds payouts (dated from %s on); it is not split, and new years' "
            "payouts are written to it",
            FUTURE,
            start.isoformat(),
        )
        return []
    cursor.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {FUTURE}")
    cursor.execute(f"DROP TABLE {FUTURE}")
    after = year_after(year_start(through))  # every year starting at or before ``through``
    made = _years_create(cursor, start=start, before=after)
    partition_create(cursor, FUTURE, start=after, end=None)
    logger.info("payout partitions: made %s; %s now starts at %s", ", ".join(made), FUTURE, after.isoformat())
    return made
