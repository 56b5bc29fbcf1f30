"""Writes of the payout ledger: paying every finished, unpaid business week.

``payouts_pay_due`` is what the ``weekly-payouts`` job runs, as of the run's logical time
(``scheduled_for``), never the wall clock:

1. Take the restaurants whose ledger is open (active ones, and deactivated ones until
   the week they were deactivated in is paid; all, or the ones a manual catch-up names)
   in id order and cut them into batches of a few thousand.
2. For each batch, in its own transaction: pass ``ctx.fence_check`` with the run's fencing
   token (a worker that lost its run is refused here, however long it slept), compute
   the finished weeks of the last few of each zone the batch uses (one cheap query and a
   little Python), and write every due payout of the batch with one INSERT ... SELECT
   (``payouts.queries``), continuing each restaurant's contiguous ledger from its last
   payout's end. A restaurant whose ledger ends before those weeks (a long outage, a
   first catch-up) is not paid by it; the batch's restaurants the INSERT did not pay are
   then paid from the weeks that reach back to their ledgers' ends, a second INSERT.
   If the database refuses a batch's payouts for its data (a week too large for the
   ledger's columns, say), the batch is paid restaurant by restaurant, each in a
   savepoint, and those refused again are left unpaid and reported; the rest are paid.
3. After each batch, tell the caller (the job heartbeats and reports progress).

A second payout for the same hours is impossible even without the fence: each payout
starts where the last one ended, and the unique constraint (restaurant, period_start)
makes the insert skip a period written meanwhile. Orders are not stamped with their
payout; a payout covers the orders of its restaurant delivered inside its bounds, and a
delivery inside a paid period is refused (``orders.services.order_deliver`` and, on
PostgreSQL, a trigger), so every delivered order is paid exactly once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.db import DataError, IntegrityError, connection, transaction

from orders.models import CommissionRateChange, Order, Restaurant
from payouts import sql
from payouts.errors import PayoutError
from payouts.models import PAYOUT_JOB, Payout
from payouts.partitions import partitions_ensure
from payouts.selectors import (
    LedgerHoldings,
    ledger_holdings,
    payout_batches,
    payout_ledgers_behind,
    payout_restaurant_ids,
    payout_weeks_due,
    payout_weeks_recent,
)
from scheduling.models import JobRun
from scheduling.services import run_execute_here
from statements.models import Statement
from statements.services import statements_create_for_payouts
from tiffin.db import jit_off
from transfers.models import Transfer
from transfers.services import transfers_create_for_payouts

# One fencing resource for the whole ledger: any run that wrote payouts makes every run
# with an older token stale, whichever restaurants each covered.
PAYOUT_FENCE_RESOURCE = "payouts:ledger"
# A manual run restricted to some restaurants names them in its subject, which is part
# of the claim key: "restaurants:1-3,7".
_SUBJECT_PREFIX = "restaurants:"
_SUBJECT_MAX = JobRun._meta.get_field("subject").max_length or 200


class PayoutRun(Protocol):
    """What a payout pass needs from the run writing it; the job passes its
    ``scheduling.context.RunContext``. ``fence_check(resource)`` must raise
    ``StaleFenceError`` when the run may no longer write (``RunContext.fence_check``);
    ``fence`` and ``run_id`` are stamped on each payout row (its provenance)."""

    @property
    def fence(self) -> int: ...

    @property
    def run_id(self) -> int | None: ...

    def fence_check(self, resource: str) -> None: ...


@dataclass(frozen=True)
class BatchProgress:
    batches_done: int
    batches: int
    restaurants_done: int
    restaurants: int
    written: int  # payouts written so far by this call


@dataclass(frozen=True)
class UnpaidRestaurant:
    """A restaurant a pass could not pay: the database refused its payouts, and why."""

    restaurant_id: int
    reason: str


@dataclass(frozen=True)
class PayoutPassResult:
    restaurants: int
    batches: int
    written: int
    # The restaurants whose due weeks could not be written; every other one was paid.
    unpaid: tuple[UnpaidRestaurant, ...] = ()


def payouts_pay_due(
    *,
    as_of: datetime,
    run: PayoutRun,
    now: datetime,
    restaurant_ids: Sequence[int] | None = None,
    on_batch: Callable[[BatchProgress], None] | None = None,
    batch_size: int | None = None,
) -> PayoutPassResult:
    """Pay every finished, unpaid week of the active restaurants as of ``as_of``.

    ``run`` is the run writing (the job's ``ctx``): each batch passes
    ``run.fence_check(PAYOUT_FENCE_RESOURCE)`` first, and its rows carry ``run.fence`` and
    ``run.run_id``. ``now`` is the clock time the caller read at the edge: it becomes
    ``created_at`` of the rows (when they were written). ``restaurant_ids``
    restricts the pass (None means every active restaurant); ``batch_size`` is
    restaurants per transaction (None: the PAYOUT_BATCH_SIZE setting). A restaurant whose
    payouts the database refuses is left unpaid and listed in the result's ``unpaid``;
    the others are paid (``_pay_batch``).
    """
    size = batch_size or settings.PAYOUT_BATCH_SIZE
    partitions_ensure(now=now)
    with transaction.atomic():
        # Each restaurant's paid_through probe names every partition of the ledger: costed
        # past jit_above_cost, JIT compiled the lookup for longer than it ran (docs/benchmark-history.md).
        jit_off()
        ids = payout_restaurant_ids(restaurant_ids=restaurant_ids)
    batches = payout_batches(ids=ids, restricted=restaurant_ids is not None, size=size)
    written, unpaid = 0, list[UnpaidRestaurant]()
    for number, batch in enumerate(batches, start=1):
        listed = ids[(number - 1) * size : number * size]
        count, refused = _pay_batch(batch=batch, listed=listed, as_of=as_of, run=run, now=now)
        written, unpaid = written + count, unpaid + refused
        if on_batch is not None:
            on_batch(BatchProgress(number, len(batches), min(number * size, len(ids)), len(ids), written))
    return PayoutPassResult(restaurants=len(ids), batches=len(batches), written=written, unpaid=tuple(unpaid))


def _pay_batch(
    *,
    batch: sql.RestaurantBatch,
    listed: Sequence[int],
    as_of: datetime,
    run: PayoutRun,
    now: datetime,
) -> tuple[int, list[UnpaidRestaurant]]:
    """Pay the batch in one transaction; return how many payouts it wrote and the
    restaurants it could not pay.

    1. Pass the fence, then pay the whole batch (``_pay_restaurants``) inside a savepoint.
    2. If the database refuses that for the data (a value out of range, a constraint), the
       savepoint is rolled back and each of ``listed`` is paid alone, each in a savepoint
       of its own: the ones it refuses again are left unpaid and returned with the reason,
       the others are paid. One restaurant's week that cannot be written so never stops
       everyone else's. Other errors (a lost connection, a timeout) fail the batch.
    """
    with transaction.atomic():
        run.fence_check(PAYOUT_FENCE_RESOURCE)
        write = functools.partial(_pay_restaurants, as_of=as_of, fence=run.fence, job_run_id=run.run_id, now=now)
        try:
            with transaction.atomic():
                return len(write(batch=batch, listed=listed)), []
        except (DataError, IntegrityError):
            pass  # one of the batch's restaurants cannot be paid: find it and pay the rest
        written, unpaid = 0, list[UnpaidRestaurant]()
        for restaurant_id in listed:
            try:
                with transaction.atomic():
                    written += len(
                        write(batch=sql.RestaurantBatch(restaurant_id, restaurant_id), listed=[restaurant_id])
                    )
            except (DataError, IntegrityError) as error:
                unpaid.append(UnpaidRestaurant(restaurant_id=restaurant_id, reason=_first_line(error)))
        return written, unpaid


def _pay_restaurants(
    *,
    batch: sql.RestaurantBatch,
    listed: Sequence[int],
    as_of: datetime,
    fence: int,
    job_run_id: int | None,
    now: datetime,
) -> list[int]:
    """Pay the batch from the recent weeks, then ``listed`` restaurants (its open ledgers)
    that got nothing from the weeks reaching back to their ledgers' ends: the ones behind,
    and the few with nothing due (who cost a probe each). Returns whom each payout pays."""
    jit_off()  # index lookups per restaurant, like the probe above; undone with a savepoint
    weeks = payout_weeks_recent(batch=batch, as_of=as_of)
    paid = sql.payouts_insert_due(batch=batch, weeks=weeks, job_run_id=job_run_id, fence=fence, now=now)
    unpaid = sorted(set(listed).difference(paid))
    if unpaid:
        rest = sql.RestaurantBatch(unpaid[0], unpaid[-1], tuple(unpaid))
        weeks = payout_weeks_due(batch=rest, as_of=as_of)
        paid += sql.payouts_insert_due(batch=rest, weeks=weeks, job_run_id=job_run_id, fence=fence, now=now)

    # --- Transfers: each payout with a positive net gets its outbox row in this same
    # transaction (transfers/services.py, docs/transfers.md).
    transfers_create_for_payouts(restaurant_ids=paid, written_at=now)

    # --- Statements: each payout's weekly email, its outbox row written in this same
    # transaction (statements/services.py, docs/statements.md).
    statements_create_for_payouts(restaurant_ids=paid, written_at=now)

    return paid


def _first_line(error: Exception) -> str:
    """The database's own message, without the statement it quotes."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else 'no message'}"[:500]


def ledger_wipe(*, development: bool, delete_payouts: bool) -> LedgerHoldings:
    """Delete the whole ledger: payouts, rate changes, orders and restaurants, together.
    For development databases only (``seed_demo --reset``); returns what it deleted.

    The one path of the project that deletes a payout. It takes the orders with them, so
    no delivered order is ever left looking unpaid (a later run would pay it again).
    1. A ledger that holds nothing: nothing to do.
    2. ``development`` off (the caller passes ``settings.DEBUG``): refuse, naming the counts.
    3. Payouts present and no ``delete_payouts`` (the command's explicit opt-in): refuse.
    4. Otherwise TRUNCATE the append-only tables (their row triggers refuse DELETE) and
       delete orders, then restaurants, in the caller's transaction.
    A refusal deletes nothing. Why DEBUG alone is not enough: an operator short of the
    production key can start a command with DEBUG=1; the opt-in names the destruction.
    """
    holdings = ledger_holdings()
    if holdings.empty:
        return holdings
    if not development:
        raise PayoutError(
            f"refusing to delete the ledger outside development settings (DEBUG is off): this database "
            f"holds {holdings.phrase()}; nothing was deleted"
        )
    if holdings.payouts and not delete_payouts:
        raise PayoutError(
            f"this database holds {holdings.phrase()}: deleting payouts needs the explicit opt-in "
            "(seed_demo --reset --delete-payouts), which deletes the orders they cover with them; nothing was deleted"
        )
    with transaction.atomic():
        Statement.objects.all().delete()  # the statement outbox names the ledger's identities
        _ledger_truncate()
        Order.objects.all().delete()
        Restaurant.objects.all().delete()
    return holdings


def _ledger_truncate() -> None:
    """Empty the payouts and rate changes (append-only: row triggers refuse their DELETE).
    On PostgreSQL a statement trigger refuses TRUNCATE of them (migration
    payouts/0010_ledger_truncate_guard) unless the transaction says it is this wipe."""
    if connection.vendor == "postgresql":  # seam: the TRUNCATE guard is a PostgreSQL trigger
        with connection.cursor() as cursor:
            # Deferred foreign-key checks still pending in this transaction block a TRUNCATE.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("SET LOCAL tiffin.ledger_wipe = 'on'")  # until this transaction ends
            cursor.execute("TRUNCATE transfers_transfer, payouts_payout, orders_commissionratechange")
        return
    Transfer.objects.all().delete()
    Payout.objects.all().delete()
    CommissionRateChange.objects.all().delete()


# --- Manual catch-up --------------------------------------------------------------------


def payout_subject(*, restaurant_ids: Sequence[int] | None) -> str:
    """The claim subject of a pass: empty for every restaurant, else the ids as ranges.

    Sorted and deduplicated, so the same restriction always gives the same subject and a
    repeated catch-up finds its claim taken.
    """
    if restaurant_ids is None:
        return ""
    subject = _SUBJECT_PREFIX + ",".join(_ranges(sorted(set(restaurant_ids))))
    if len(subject) > _SUBJECT_MAX:
        raise PayoutError(
            f"too many scattered restaurant ids for one catch-up ({len(subject)} characters of the "
            f"{_SUBJECT_MAX} a run's subject holds); run it in several calls"
        )
    return subject


def payout_subject_parse(subject: str) -> list[int] | None:
    """The restriction a run's subject names (None: every restaurant)."""
    if not subject:
        return None
    ranges = subject.removeprefix(_SUBJECT_PREFIX)
    if ranges == subject or not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", ranges):
        raise PayoutError(f"run subject {subject!r} is not '' or 'restaurants:<ids>' such as 'restaurants:1-3,7'")
    ids: list[int] = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        ids += range(int(first), int(last or first) + 1)
    return ids


def _ranges(ids: list[int]) -> list[str]:
    parts: list[str] = []
    start = previous = ids[0]
    for current in [*ids[1:], None]:
        if current is not None and current == previous + 1:
            previous = current
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if current is not None:
            start = previous = current
    return parts


def payout_catch_up_check(*, as_of: datetime, restaurant_ids: Sequence[int] | None, now: datetime) -> None:
    """Refuse a catch-up that cannot be right: a future ``as_of``, a restriction too
    scattered for a run's subject (``payout_subject``), or a restaurant that does not
    exist. An inactive restaurant is paid up to the week it was deactivated in. The dry
    run calls it too, so it refuses exactly what the run would."""
    if as_of > now:
        raise PayoutError(f"--as-of {as_of.isoformat()} is in the future; weeks are paid only once they are over")
    if not restaurant_ids:
        if restaurant_ids is not None:
            raise PayoutError("no restaurant ids given")
        return
    payout_subject(restaurant_ids=restaurant_ids)
    found = set(Restaurant.objects.filter(id__in=restaurant_ids).values_list("id", flat=True))
    missing = sorted(set(restaurant_ids) - found)
    if missing:
        raise PayoutError(f"no restaurant with id {', '.join(map(str, missing))}")


def payout_catch_up_execute(
    *,
    as_of: datetime,
    restaurant_ids: Sequence[int] | None,
    now: datetime,
    worker: str,
    on_batch: Callable[[BatchProgress], None] | None = None,
) -> JobRun | None:
    """Claim a manual ``weekly-payouts`` run as of ``as_of`` and execute it here.

    The same claim as every other run (INSERT ... ON CONFLICT DO NOTHING on job_name,
    subject, scheduled_for), with the restriction in the subject. Returns None when that
    exact catch-up was claimed before; raises RunCannotStartError, with nothing claimed,
    when it would have to wait behind another payout run (see ``run_execute_here``).
    ``on_batch`` hears of each batch the run pays.
    """
    payout_catch_up_check(as_of=as_of, restaurant_ids=restaurant_ids, now=now)
    return run_execute_here(
        job_name=PAYOUT_JOB,
        scheduled_for=as_of,
        now=now,
        worker=worker,
        subject=payout_subject(restaurant_ids=restaurant_ids),
        on_batch=on_batch,
    )


# --- After a pass ----------------------------------------------------------------------


def payout_pass_check_complete(*, restaurant_ids: Sequence[int] | None, as_of: datetime, written: int) -> None:
    """Raise PayoutError if a pass as of ``as_of`` over ``restaurant_ids`` (None: all)
    that wrote ``written`` payouts left a ledger far behind (``payout_ledgers_behind``).

    A pass pays every finished week; this is the net in case one ever stops short: the
    run then ends failed, saying why and naming them, and is retried, instead of
    succeeding with orders unpaid. What the pass's batches wrote stays.
    """
    with transaction.atomic():
        jit_off()  # the same paid_through probe per restaurant as the pass's first query
        behind = payout_ledgers_behind(restaurant_ids=restaurant_ids, as_of=as_of)
    if behind:
        shown = ", ".join(map(str, behind[:10])) + (f" and {len(behind) - 10} more" if len(behind) > 10 else "")
        raise PayoutError(
            f"the pass stopped short: it wrote {written} payouts, and restaurant {shown} still "
            f"{'has' if len(behind) == 1 else 'have'} finished weeks unpaid as of {as_of.isoformat()}; "
            "the run fails so that it is retried"
        )
