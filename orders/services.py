"""Writes for restaurants and orders.

Order statuses move only along these edges; every other request is refused::

    placed   -> accepted | rejected | cancelled
    accepted -> delivered
    rejected, cancelled, delivered: final

Each move is one conditional UPDATE (``WHERE id = ? AND status IN (legal sources)``)
followed by a check that exactly one row changed. Of two racing callers the database
applies only one: on PostgreSQL the second UPDATE waits for the first's row lock, then
re-reads the row, no longer matches, and changes nothing; SQLite has a single writer. The
loser gets OrderTransitionError and has written nothing. No lock is taken before the
update because nothing is read before it.

Cancelling is allowed only from ``placed``. Once a restaurant accepts, it is cooking and
the order counts towards its payout when delivered; undoing that is a refund, which this
application does not model. The stale-order jobs rely on it: an order the restaurant
accepted or rejected in the meantime is left alone, not cancelled.

Placing an order also creates its delayed ``cancel-stale-order`` run due at ``placed_at +
ORDER_ACCEPT_TIMEOUT_SECONDS``: the order and its cancellation commit or roll back together
(on PostgreSQL they are one statement, ``orders/sql.py``), so an order never exists
without one. The ``cancel-stale-orders`` safety net covers orders whose run is missing
anyway (written by other means, such as a bulk import or the demo seed) or dead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import OuterRef

from orders import sql
from orders.errors import (
    LedgerError,
    OrderDeadlineError,
    OrderError,
    OrderNotFoundError,
    OrderTransitionError,
    RestaurantNotFoundError,
)
from orders.models import (
    CANCEL_STALE_ORDER_JOB,
    ORDER_SUBJECT_PREFIX,
    ORDER_TOTAL_MAX,
    STALE_CANCEL_REASON,
    CommissionRateChange,
    Order,
    OrderStatus,
    Restaurant,
    validate_onboarded_at,
)
from orders.selectors import order_status_get, restaurant_paid_through
from scheduling.selectors import run_in_flight_exists
from scheduling.services import run_schedule_delayed_with_subject_fast
from tiffin import clock
from tiffin.validators import require_aware, validate_time_zone

logger = logging.getLogger("orders")

_NAME_MAX = Restaurant._meta.get_field("name").max_length or 200
_CUSTOMER_REF_MAX = Order._meta.get_field("customer_ref").max_length or 64
_REASON_MAX = Order._meta.get_field("cancel_reason").max_length or 200
# How far ahead an onboarding may be entered (restaurant_onboarding_errors).
ONBOARDING_AHEAD = timedelta(days=366)


@dataclass(frozen=True)
class _Transition:
    action: str  # the past participle the error message uses: "order 3 ... can be accepted"
    sources: tuple[OrderStatus, ...]
    target: OrderStatus
    stamp: str  # the timestamp field set to ``now``
    # Only before the order's acceptance deadline, judged by the database's clock.
    before_deadline: bool = False


_ACCEPT = _Transition("accepted", (OrderStatus.PLACED,), OrderStatus.ACCEPTED, "accepted_at", before_deadline=True)
_REJECT = _Transition("rejected", (OrderStatus.PLACED,), OrderStatus.REJECTED, "rejected_at")
_DELIVER = _Transition("delivered", (OrderStatus.ACCEPTED,), OrderStatus.DELIVERED, "delivered_at")
_CANCEL = _Transition("cancelled", (OrderStatus.PLACED,), OrderStatus.CANCELLED, "cancelled_at")


def restaurant_create(*, name: str, timezone: str, commission_rate: Decimal, onboarded_at: datetime) -> Restaurant:
    """Create a restaurant; a bad name, zone, rate or onboarding instant (out of
    ``orders.models.validate_onboarded_at``'s range) raises ValidationError (per field)."""
    require_aware(onboarded_at, "onboarded_at")
    errors = _restaurant_errors(name=name, timezone=timezone, commission_rate=commission_rate)
    try:
        validate_onboarded_at(onboarded_at)
    except ValidationError as error:
        errors["onboarded_at"] = error.messages[0]
    if errors:
        raise ValidationError(errors)
    return Restaurant.objects.create(
        name=name.strip(), timezone=timezone, commission_rate=commission_rate, onboarded_at=onboarded_at
    )


def restaurant_onboarding_errors(
    *, restaurant: Restaurant | None, onboarded_at: datetime, now: datetime
) -> dict[str, str]:
    """Why ``onboarded_at`` would be refused for ``restaurant`` (None: a new one), per
    field (the admin shows them on its form).

    The ledger starts with the onboarding, so it may not leave an order before it: no
    move past the restaurant's first order (placed_at, which precedes any delivery), and
    none at all once a payout was cut from it. Beside ``validate_onboarded_at``'s fixed
    range, at most ONBOARDING_AHEAD after ``now``: a later date is a typing error.
    """
    if restaurant is not None and restaurant.pk is not None and onboarded_at == restaurant.onboarded_at:
        return {}  # unchanged
    try:
        validate_onboarded_at(onboarded_at)
    except ValidationError as error:
        return {"onboarded_at": error.messages[0]}
    when = f"{onboarded_at:%Y-%m-%d %H:%M} UTC"
    if onboarded_at > now + ONBOARDING_AHEAD:
        return {"onboarded_at": f"onboarding {when} is more than {ONBOARDING_AHEAD.days} days ahead"}
    if restaurant is None or restaurant.pk is None:
        return {}
    if restaurant_paid_through(restaurant_id=restaurant.pk) is not None:
        return {"onboarded_at": f"restaurant {restaurant.pk} has payouts, which start at its onboarding: it is fixed"}
    # Never paid, so a young restaurant: its orders by the foreign key's index, sorted.
    first = restaurant.orders.order_by("placed_at").values_list("placed_at", flat=True).first()
    if first is not None and onboarded_at > first:
        return {
            "onboarded_at": f"restaurant {restaurant.pk} has an order placed at {first:%Y-%m-%d %H:%M:%S} UTC; "
            f"onboarding at {when} would leave it before the ledger's start, never paid"
        }
    return {}


def order_place(*, restaurant: Restaurant, customer_ref: str, total: Decimal, now: datetime) -> Order:
    """Place an order at ``now``. Amounts are stored as given: a total with fractions of a
    cent is refused rather than rounded, so the amount charged is the amount stored. A
    total above ORDER_TOTAL_MAX is refused (ValidationError on ``total``): the ledger's
    columns hold any week of orders up to it."""
    require_aware(now, "now")
    errors = _order_errors(customer_ref=customer_ref, total=total)
    if errors:
        raise ValidationError(errors)
    if not restaurant.is_active:
        raise OrderError(f"restaurant {restaurant.pk} ({restaurant.name}) is not taking orders: it is inactive")
    if now < restaurant.onboarded_at:
        raise OrderError(
            f"restaurant {restaurant.pk} ({restaurant.name}) takes orders from its onboarding at "
            f"{restaurant.onboarded_at:%Y-%m-%d %H:%M} UTC, not at {now:%Y-%m-%d %H:%M} UTC"
        )
    deadline = order_accept_deadline(placed_at=now)
    row, run_id = run_schedule_delayed_with_subject_fast(
        job_name=CANCEL_STALE_ORDER_JOB,
        subject=sql.order_insert(restaurant_id=restaurant.pk, customer_ref=customer_ref, total=total, placed_at=now),
        scheduled_for=deadline,
        now=now,
    )
    order = sql.order_created(
        order_id=row[0], restaurant_id=restaurant.pk, customer_ref=customer_ref, total=total, placed_at=now
    )
    order.restaurant = restaurant
    if run_id is None:
        # The claim key of a brand-new id was taken: a run left from rows of an earlier
        # life of this database (orders wiped, their ids reused, job_runs kept).
        logger.warning(
            "order %s is placed, but a %s run for %s due at %s already existed, so none was created for it; "
            "the existing run, or the cancel-stale-orders safety net, cancels it if it is not accepted",
            order.pk, CANCEL_STALE_ORDER_JOB, order_cancellation_subject(order_id=order.pk), deadline.isoformat(),
        )  # fmt: skip
    return order


def order_accept_deadline(*, placed_at: datetime) -> datetime:
    """When an order placed at ``placed_at`` is cancelled unless accepted or rejected."""
    return placed_at + timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)


def order_cancellation_subject(*, order_id: int) -> str:
    return f"{ORDER_SUBJECT_PREFIX}{order_id}"


def order_id_from_subject(subject: str) -> int:
    """The order a ``cancel-stale-order`` run is about; ValueError if the subject is not one."""
    number = subject.removeprefix(ORDER_SUBJECT_PREFIX)
    if number == subject or not number.isdigit():
        raise ValueError(f"run subject {subject!r} does not name an order (expected 'order:<id>')")
    return int(number)


def order_accept(*, order_id: int, now: datetime) -> Order:
    """Accept a placed order before its deadline (``order_accept_deadline``).

    "Before its deadline" is judged by the database's clock in the UPDATE itself, as the
    stale-order cancellation judges "past it" (``orders_cancel_unaccepted``), so the two
    never disagree whichever server's clock runs fast or slow: an order is either still
    acceptable or cancellable, never both. Past it: OrderDeadlineError, nothing written.
    """
    return _transition(_ACCEPT, order_id=order_id, now=now)


def order_reject(*, order_id: int, now: datetime) -> Order:
    return _transition(_REJECT, order_id=order_id, now=now)


def order_deliver(*, order_id: int, now: datetime) -> Order:
    """Mark an accepted order delivered at ``now`` (the edge passes ``tiffin.clock.now()``).

    Refused (LedgerError) when ``now`` falls inside a period the restaurant was already
    paid for: the payout is written and immutable, so the order would never be paid (on
    PostgreSQL the orders_order_payout_guard triggers refuse it too, race-free against a
    payout being written; their refusal is raised as the same LedgerError). Refused too
    before the restaurant's onboarding, where its ledger starts (no payout would ever cover
    it), and once the restaurant is deactivated: its ledger closes with the week of its
    deactivation.
    """
    require_aware(now, "now")
    try:
        with transaction.atomic():
            order = Order.objects.select_related("restaurant").filter(pk=order_id).first()
            if order is None:
                raise OrderNotFoundError(order_id)
            _refuse_unpayable_delivery(order, now=now)
            return _transition(_DELIVER, order_id=order_id, now=now)
    except IntegrityError as error:
        # A payout of the period committed between the check above and the UPDATE: the
        # trigger, waiting for the payout's lock on the restaurant, then saw it and refused.
        refusal = _ledger_guard_refusal(error)
        if refusal is None:
            raise
        raise LedgerError(f"{refusal}, so it would never be paid") from error


# The SQLSTATE the ledger's triggers raise (payouts/migrations/0004_ledger_guards.py).
_RESTRICT_VIOLATION = "23001"


def _ledger_guard_refusal(error: IntegrityError) -> str | None:
    """The message of a ledger trigger's refusal ("order 7 cannot be delivered at ...:
    restaurant 3 is paid through ..."), or None for any other integrity error."""
    cause = error.__cause__
    if getattr(cause, "sqlstate", None) != _RESTRICT_VIOLATION:
        return None
    diag = getattr(cause, "diag", None)
    return str(getattr(diag, "message_primary", None) or str(error).splitlines()[0])


def _refuse_unpayable_delivery(order: Order, *, now: datetime) -> None:
    restaurant = order.restaurant
    if not restaurant.is_active:
        raise LedgerError(
            f"order {order.pk} cannot be delivered: restaurant {restaurant.pk} was deactivated at "
            f"{restaurant.deactivated_at:%Y-%m-%d %H:%M} UTC and its ledger closes with that week; "
            "reactivate it to deliver"
        )
    if now < restaurant.onboarded_at:
        raise LedgerError(
            f"order {order.pk} cannot be delivered at {now:%Y-%m-%d %H:%M:%S} UTC: restaurant {restaurant.pk} "
            f"is onboarded at {restaurant.onboarded_at:%Y-%m-%d %H:%M} UTC, where its ledger starts, so it "
            "would never be paid"
        )
    paid_through = restaurant_paid_through(restaurant_id=restaurant.pk)
    if paid_through is not None and now < paid_through:
        raise LedgerError(
            f"order {order.pk} cannot be delivered at {now:%Y-%m-%d %H:%M:%S} UTC: restaurant {restaurant.pk} "
            f"is already paid through {paid_through:%Y-%m-%d %H:%M} UTC, so it would never be paid"
        )


def restaurant_deactivate(*, restaurant_id: int, now: datetime) -> Restaurant:
    """Stop the restaurant's orders from ``now``: no new orders, no deliveries. Its
    finished weeks are still paid, up to and including the week it is deactivated in."""
    require_aware(now, "now")
    changed = Restaurant.objects.filter(pk=restaurant_id, is_active=True).update(is_active=False, deactivated_at=now)
    return _restaurant_after(restaurant_id, changed=changed, already="inactive")


def restaurant_reactivate(*, restaurant_id: int) -> Restaurant:
    """Take orders again; the ledger continues from its last payout's end."""
    changed = Restaurant.objects.filter(pk=restaurant_id, is_active=False).update(is_active=True, deactivated_at=None)
    return _restaurant_after(restaurant_id, changed=changed, already="active")


def _restaurant_after(restaurant_id: int, *, changed: int, already: str) -> Restaurant:
    restaurant = Restaurant.objects.filter(pk=restaurant_id).first()
    if restaurant is None:
        raise RestaurantNotFoundError(restaurant_id)
    if not changed:
        raise OrderError(f"restaurant {restaurant_id} is already {already}")
    return restaurant


def restaurant_rate_change(
    *, restaurant_id: int, rate: Decimal, effective_from: datetime, now: datetime
) -> CommissionRateChange:
    """Charge ``rate`` on every payout period that starts at or after ``effective_from``.

    The past is not rewritten: ``effective_from`` must be ``now`` or later (a finished
    week keeps the rate it was earned at, paid or not) and after the restaurant's last
    payout's end. Changes are history: append-only (a trigger enforces it on PostgreSQL).
    """
    require_aware(effective_from, "effective_from")
    require_aware(now, "now")
    restaurant = Restaurant.objects.filter(pk=restaurant_id).first()
    if restaurant is None:
        raise RestaurantNotFoundError(restaurant_id)
    errors = rate_change_errors(restaurant=restaurant, rate=rate, effective_from=effective_from, now=now)
    if errors:
        raise ValidationError(errors)
    return CommissionRateChange.objects.create(
        restaurant=restaurant, rate=rate, effective_from=effective_from, created_at=now
    )


def rate_change_errors(
    *, restaurant: Restaurant, rate: Decimal, effective_from: datetime, now: datetime
) -> dict[str, str]:
    """Why a rate change would be refused, per field (the admin shows them on its form)."""
    rate_error = _rate_error(rate)
    if rate_error:
        return {"rate": rate_error}
    when = f"{effective_from:%Y-%m-%d %H:%M} UTC"
    paid_through = restaurant_paid_through(restaurant_id=restaurant.pk)
    if effective_from < now:
        error = f"a rate change takes effect now or later, not at {when}: weeks that have begun keep their rate"
    elif paid_through is not None and effective_from < paid_through:
        error = (
            f"restaurant {restaurant.pk} is paid through {paid_through:%Y-%m-%d %H:%M} UTC; a change cannot reach it"
        )
    elif restaurant.rate_changes.filter(effective_from=effective_from).exists():
        error = f"restaurant {restaurant.pk} already has a rate change at {when}"
    else:
        return {}
    return {"effective_from": error}


def order_cancel(*, order_id: int, now: datetime, reason: str) -> Order:
    """Cancel an order the restaurant has not yet accepted or rejected (see module docstring)."""
    reason = reason.strip()
    if not reason or len(reason) > _REASON_MAX:
        raise ValidationError({"reason": f"a cancellation needs a reason of 1 to {_REASON_MAX} characters"})
    return _transition(_CANCEL, order_id=order_id, now=now, cancel_reason=reason)


def orders_cancel_unaccepted(*, order_ids: Sequence[int]) -> int:
    """Cancel those of ``order_ids`` still ``placed`` and past their deadline; return how many.

    One UPDATE for the whole batch, conditional on the status: an order accepted or
    rejected a moment earlier no longer matches and is left alone (on PostgreSQL a
    concurrent accept holding the row makes this wait, then re-read the row and skip it).
    "Past its deadline" is judged by the database's clock in that same statement
    (``tiffin.clock.DatabaseNow``), which also stamps ``cancelled_at``: a worker or a
    scheduler whose clock runs fast or slow can make a run come early or late, but it
    can never cancel an order before its deadline, and the recorded time of a
    cancellation is never before the deadline it enforced.
    """
    timeout = settings.ORDER_ACCEPT_TIMEOUT_SECONDS
    return (
        Order.objects.filter(
            id__in=order_ids,
            status=OrderStatus.PLACED,
            placed_at__lte=clock.DatabaseNow(minus_seconds=timeout),
        )
        .order_by()
        .update(status=OrderStatus.CANCELLED, cancelled_at=clock.DatabaseNow(), cancel_reason=STALE_CANCEL_REASON)
    )


def orders_cancel_overdue(*, batch_size: int | None = None) -> int:
    """The safety net: cancel orders still ``placed`` past their deadline, by the
    database's clock, whose cancellation run is missing or dead. Returns how many.

    Batches of ``batch_size`` (None: the ORDER_CANCEL_BATCH_SIZE setting), each its own
    transaction: the rows are taken with FOR UPDATE SKIP LOCKED (an order being accepted
    right now is skipped, and two safety nets never take the same rows), then cancelled
    with the same conditional UPDATE as the delayed runs. Selection and UPDATE both ask the database's clock, which only
    moves forward between them, so every order selected as overdue is still overdue.
    The tick's own logical time is not the judge: a scheduler whose clock runs ahead
    claims it early.
    """
    size = batch_size or settings.ORDER_CANCEL_BATCH_SIZE
    cancelled = 0
    while True:
        with transaction.atomic():
            ids = _overdue_order_ids(limit=size)
            cancelled += orders_cancel_unaccepted(order_ids=ids)
        if len(ids) < size:
            return cancelled


def _overdue_order_ids(*, limit: int) -> list[int]:
    # Served by the partial index order_pending_by_id, walked in id order (ids follow
    # placement, so the overdue orders come first and the scan stops after ``limit`` of them;
    # the not-yet-overdue ones are the newest, at its end). A cancellation run still in
    # flight will act on its order, so the safety net leaves such orders to it; any other
    # state (dead, or no run at all) means nobody will.
    live_run = run_in_flight_exists(
        job_name=CANCEL_STALE_ORDER_JOB, subject_prefix=ORDER_SUBJECT_PREFIX, subject_id=OuterRef("id")
    )
    return list(
        Order.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(
            status=OrderStatus.PLACED,
            placed_at__lte=clock.DatabaseNow(minus_seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS),
        )
        .filter(~live_run)
        .order_by("id")
        .values_list("id", flat=True)[:limit]
    )


def _transition(transition: _Transition, *, order_id: int, now: datetime, **extra: Any) -> Order:
    require_aware(now, "now")
    rows = Order.objects.filter(pk=order_id, status__in=transition.sources)
    if transition.before_deadline:
        rows = rows.filter(placed_at__gt=clock.DatabaseNow(minus_seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS))
    with transaction.atomic():
        changed = rows.order_by().update(status=transition.target, **{transition.stamp: now}, **extra)
        if changed != 1:
            raise _refusal(transition, order_id=order_id)
        # Read back inside the transaction: our row lock keeps anyone else from moving it.
        return Order.objects.select_related("restaurant").get(pk=order_id)


def _refusal(transition: _Transition, *, order_id: int) -> OrderError:
    # Under READ COMMITTED this sees the winner's committed status, so the message names it.
    current = order_status_get(order_id=order_id)
    if current is None:
        return OrderNotFoundError(order_id)
    if transition.before_deadline and current in transition.sources:
        # Its status allows the move, so the UPDATE left it for its deadline.
        return OrderDeadlineError(order_id=order_id, action=transition.action)
    allowed = [status.value for status in transition.sources]
    return OrderTransitionError(order_id=order_id, current=current, action=transition.action, allowed_from=allowed)


def _restaurant_errors(*, name: str, timezone: str, commission_rate: Decimal) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not name.strip() or len(name.strip()) > _NAME_MAX:
        errors["name"] = f"a restaurant needs a name of 1 to {_NAME_MAX} characters"
    try:
        validate_time_zone(timezone)
    except ValidationError as error:
        errors["timezone"] = error.messages[0]
    rate_error = _rate_error(commission_rate)
    if rate_error:
        errors["commission_rate"] = rate_error
    return errors


def _rate_error(rate: Decimal) -> str | None:
    if not isinstance(rate, Decimal) or not rate.is_finite():
        return f"commission rate {rate!r} must be a finite Decimal such as Decimal('0.15')"
    if not Decimal("0") <= rate < Decimal("1"):
        return f"commission rate {rate} must be a fraction with 0 <= rate < 1 (0.15 is 15 %)"
    if _decimal_places(rate) > 4:
        return f"commission rate {rate} has more than 4 decimal places"
    return None


def _order_errors(*, customer_ref: str, total: Decimal) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not customer_ref or len(customer_ref) > _CUSTOMER_REF_MAX:
        errors["customer_ref"] = f"customer_ref must be 1 to {_CUSTOMER_REF_MAX} characters"
    if not isinstance(total, Decimal) or not total.is_finite():
        errors["total"] = f"total {total!r} must be a finite Decimal such as Decimal('12.50')"
    elif total <= 0:
        errors["total"] = f"total {total} must be more than 0"
    elif _decimal_places(total) > 2:
        errors["total"] = f"total {total} has fractions of a cent; pass it rounded to 2 decimal places"
    elif total > ORDER_TOTAL_MAX:
        # The payout columns are sized from this limit (orders/models.py): above it, a
        # week of orders could overflow the ledger.
        errors["total"] = f"total {total} is too large: an order is at most {ORDER_TOTAL_MAX:,}"
    return errors


def _decimal_places(value: Decimal) -> int:
    exponent = value.normalize().as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0
