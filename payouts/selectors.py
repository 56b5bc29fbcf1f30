"""Reads of the payout ledger: a run's payouts, totals, a dry run, the orders a payout
covers, and the weekly table the demo prints. Keyword-only functions; no writes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Aggregate, Count, F, Min, OuterRef, Q, QuerySet, Subquery, Sum, Window
from django.db.models.functions import Coalesce, Lag

from orders.models import CommissionRateChange, Order, OrderStatus, Restaurant
from payouts import sql
from payouts.models import PAYOUT_JOB, Payout
from payouts.weeks import BusinessWeek, week_of, weeks_finished
from scheduling.models import JobRun, RunStatus
from tiffin.money import cents, money_text

# See payout_weeks_recent and payout_weeks_due: a ledger at most this far behind is paid
# from a list of the recent weeks, without reading where each one ends first.
SHORT_HISTORY = timedelta(weeks=8)
# Longer than any business period: a week of local Mondays, a DST hour, and a margin.
LEDGER_BEHIND = timedelta(days=8)


@dataclass(frozen=True)
class PayoutTotals:
    count: int
    order_count: int
    gross: Decimal
    commission: Decimal
    net: Decimal


def payout_totals(*, payouts: QuerySet[Payout]) -> PayoutTotals:
    """Count and sums of ``payouts`` (any filtered queryset), in cents (``tiffin.money.cents``)."""
    row = payouts.order_by().aggregate(
        n=Count("id"), orders=Sum("order_count"), gross=Sum("gross"), commission=Sum("commission"), net=Sum("net")
    )
    return PayoutTotals(
        count=row["n"],
        order_count=row["orders"] or 0,
        gross=cents(row["gross"]),
        commission=cents(row["commission"]),
        net=cents(row["net"]),
    )


def payouts_of_run(*, run_id: int) -> QuerySet[Payout]:
    """The payouts one run wrote, by week and restaurant (served by the job_run FK index)."""
    return (
        Payout.objects.filter(job_run_id=run_id)
        .select_related("restaurant")
        .order_by("week_start_local", "restaurant__name", "restaurant_id")
    )


# --- What a pass covers ------------------------------------------------------------------


def payout_restaurant_ids(*, restaurant_ids: Sequence[int] | None) -> list[int]:
    """The restaurants with an open ledger a pass covers, in id order."""
    restaurants = payout_open_ledgers()
    if restaurant_ids is not None:
        restaurants = restaurants.filter(id__in=restaurant_ids)
    return list(restaurants.order_by("id").values_list("id", flat=True))


def payout_open_ledgers() -> QuerySet[Restaurant]:
    """Restaurants that may still be owed a payout, annotated with ``paid_through``: the
    active ones, and the deactivated ones whose last payout ends before their deactivation
    (a superset of what the SQL pays, which also requires a due period to start before
    ``deactivated_at``)."""
    return Restaurant.objects.annotate(paid_through=_paid_through()).filter(
        Q(deactivated_at__isnull=True) | Q(paid_through__isnull=True) | Q(paid_through__lt=F("deactivated_at"))
    )


def _paid_through() -> Subquery:
    """The end of the outer restaurant's newest payout, where its ledger continues (the
    newest row of the unique index payout_one_per_restaurant_week)."""
    return Subquery(Payout.objects.filter(restaurant=OuterRef("pk")).order_by("-period_start").values("period_end")[:1])


def _per_restaurant(rows: QuerySet[Any], aggregate: Aggregate) -> Subquery:
    """``aggregate`` over ``rows`` (filtered on the outer restaurant), one value per
    outer row: a correlated subquery, not a join and GROUP BY over the whole table."""
    return Subquery(rows.order_by().values("restaurant_id").annotate(value=aggregate).values("value"))


def payout_ledgers_behind(*, restaurant_ids: Sequence[int] | None, as_of: datetime) -> list[int]:
    """The open ledgers (of ``restaurant_ids``, None: all) that surely still have a
    finished period unpaid as of ``as_of``, in id order: after a pass, none.

    A ledger's next period starts at ``paid_through``, or at the latest at the onboarding
    when it has none, and ends at its zone's next local Monday 00:00, at most a week and
    a DST hour later; so one that starts LEDGER_BEHIND plus the settlement delay before
    ``as_of`` (and before the restaurant's deactivation) is finished and due. Sure, not
    exact (a ledger one period behind can pass): the net for a pass that stops far short.
    """
    delay = timedelta(seconds=settings.PAYOUT_SETTLEMENT_DELAY_SECONDS)
    ledgers = (
        payout_open_ledgers()
        .annotate(next_start=Coalesce(F("paid_through"), F("onboarded_at")))
        .filter(next_start__lte=as_of - LEDGER_BEHIND - delay)
        .filter(Q(deactivated_at__isnull=True) | Q(next_start__lt=F("deactivated_at")))
    )
    if restaurant_ids is not None:
        ledgers = ledgers.filter(id__in=restaurant_ids)
    return list(ledgers.order_by("id").values_list("id", flat=True))


def payout_batches(*, ids: list[int], restricted: bool, size: int | None = None) -> list[sql.RestaurantBatch]:
    """Cut the ids of a pass (ascending) into batches of ``size``: id ranges, which the
    primary key serves, naming the ids only when the pass is restricted to some
    (``size`` None: the PAYOUT_BATCH_SIZE setting)."""
    size = size or settings.PAYOUT_BATCH_SIZE
    chunks = [ids[start : start + size] for start in range(0, len(ids), size)]
    return [sql.RestaurantBatch(chunk[0], chunk[-1], tuple(chunk) if restricted else None) for chunk in chunks]


def payout_weeks_recent(*, batch: sql.RestaurantBatch, as_of: datetime) -> list[BusinessWeek]:
    """The finished weeks of the last SHORT_HISTORY, per zone the batch's open ledgers use
    (from the zone's earliest onboarding when that is later): one cheap aggregate, and no
    read of any restaurant's ledger.

    The SQL pays from them every restaurant whose ledger continues inside them (a weekly
    run: all of them) and leaves out the ones further behind, which it reports as unpaid
    so the caller pays them from ``payout_weeks_due``. So a weekly run reads each
    restaurant's latest payout once, in the INSERT, not once more to narrow the list.
    """
    starts = {zone: max(since, as_of - SHORT_HISTORY) for zone, since in _onboarding_by_zone(batch=batch).items()}
    return _weeks_finished(starts=starts, as_of=as_of)


def payout_weeks_due(*, batch: sql.RestaurantBatch, as_of: datetime) -> list[BusinessWeek]:
    """The finished weeks, per zone, that may still be unpaid for these restaurants.

    Each zone's list starts at the earliest week any of its restaurants may owe, and the
    SQL checks every (restaurant, week) pair for an existing row, so the list only has to
    start early enough; the shorter it is, the fewer pairs the SQL checks.

    1. Start at the zone's earliest onboarding week (one cheap aggregate). If that is at
       most SHORT_HISTORY ago everywhere (a young ledger, a catch-up of new restaurants),
       that is the list.
    2. Otherwise start after each restaurant's latest payout (its onboarding week when it
       has none): one probe of the unique index (restaurant_id, period_start) per
       restaurant, so a weekly run checks a week or two per restaurant, not its history.
       Payouts are contiguous from the onboarding week, so nothing earlier is unpaid.
    """
    starts = _onboarding_by_zone(batch=batch)
    if any(as_of - since > SHORT_HISTORY for since in starts.values()):
        starts = _onboarding_by_zone(batch=batch, since=Min(Coalesce(F("paid_through"), F("onboarded_at"))))
    return _weeks_finished(starts=starts, as_of=as_of)


def _onboarding_by_zone(*, batch: sql.RestaurantBatch, since: Aggregate | None = None) -> dict[str, datetime]:
    """Per zone of the batch's open ledgers, ``since`` (default: the earliest onboarding)."""
    in_batch = payout_open_ledgers().filter(id__gte=batch.first_id, id__lte=batch.last_id)
    if batch.only is not None:
        in_batch = in_batch.filter(id__in=batch.only)
    by_zone = in_batch.order_by().values("timezone").annotate(since=since or Min("onboarded_at"))
    return {row["timezone"]: row["since"] for row in by_zone}


def _weeks_finished(*, starts: dict[str, datetime], as_of: datetime) -> list[BusinessWeek]:
    delay = timedelta(seconds=settings.PAYOUT_SETTLEMENT_DELAY_SECONDS)
    return [
        week
        for zone, since in starts.items()
        for week in weeks_finished(timezone=zone, since=since, as_of=as_of, settlement_delay=delay)
    ]


def payouts_preview(*, as_of: datetime, restaurant_ids: Sequence[int] | None) -> list[sql.DuePayout]:
    """What a pass as of ``as_of`` would pay now, computed by the same SQL, written nowhere."""
    ids = payout_restaurant_ids(restaurant_ids=restaurant_ids)
    preview: list[sql.DuePayout] = []
    for batch in payout_batches(ids=ids, restricted=restaurant_ids is not None):
        preview += sql.payouts_select_due(batch=batch, weeks=payout_weeks_due(batch=batch, as_of=as_of))
    return sorted(preview, key=lambda due: (due.week_start_local, due.restaurant_id))


def payout_covered_orders(*, payout: Payout) -> QuerySet[Order]:
    """The orders a payout covers: its restaurant's orders delivered inside its bounds.

    Orders are not stamped with their payout; the bounds are the definition (served by
    the partial index order_delivered_by_restaurant).
    """
    return Order.objects.filter(
        restaurant_id=payout.restaurant_id,
        status=OrderStatus.DELIVERED,
        delivered_at__gte=payout.period_start,
        delivered_at__lt=payout.period_end,
    ).order_by("delivered_at", "id")


@dataclass(frozen=True)
class WeekRow:
    restaurant: str
    timezone: str
    restaurant_id: int
    onboarded_at: datetime
    week_start_local: date
    order_count: int
    gross: Decimal
    net: Decimal


def payout_weeks_table(*, limit_weeks: int = 8) -> list[WeekRow]:
    """The payouts of the latest ``limit_weeks`` local weeks, by restaurant then week."""
    weeks = list(
        Payout.objects.order_by("-week_start_local").values_list("week_start_local", flat=True).distinct()[:limit_weeks]
    )
    rows = (
        Payout.objects.filter(week_start_local__in=weeks)
        .select_related("restaurant")
        .order_by("restaurant__timezone", "restaurant__name", "restaurant_id", "week_start_local")
    )
    return [
        WeekRow(
            restaurant=payout.restaurant.name,
            timezone=payout.restaurant.timezone,
            restaurant_id=payout.restaurant_id,
            onboarded_at=payout.restaurant.onboarded_at,
            week_start_local=payout.week_start_local,
            order_count=payout.order_count,
            gross=payout.gross,
            net=payout.net,
        )
        for payout in rows
    ]


CSV_HEADER = (
    "payout_id",
    "restaurant_id",
    "restaurant",
    "timezone",
    "week_start_local",
    "period_start_utc",
    "period_end_utc",
    "hours",
    "order_count",
    "gross",
    "commission",
    "net",
    "job_run_id",
    "fence",
    "created_at_utc",
)
# A spreadsheet runs a cell that starts with one of these as a formula.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def payout_csv_rows(*, payouts: QuerySet[Payout]) -> Iterator[list[str]]:
    """The header, then one row per payout of ``payouts``, streamed from the database."""
    yield list(CSV_HEADER)
    for payout in payouts.select_related("restaurant").order_by("period_start", "restaurant_id").iterator(2000):
        yield [
            str(payout.pk),
            str(payout.restaurant_id),
            _cell(payout.restaurant.name),
            payout.restaurant.timezone,
            payout.week_start_local.isoformat(),
            payout.period_start.isoformat(),
            payout.period_end.isoformat(),
            f"{(payout.period_end - payout.period_start).total_seconds() / 3600:g}",
            str(payout.order_count),
            str(payout.gross),
            str(payout.commission),
            str(payout.net),
            "" if payout.job_run_id is None else str(payout.job_run_id),
            "" if payout.fence is None else str(payout.fence),
            payout.created_at.isoformat(),
        ]


def _cell(text: str) -> str:
    # Names come from people: defuse formula injection when the file is opened in Excel.
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def payout_week_choices(*, count: int) -> list[date]:
    """The latest ``count`` local Mondays, counting back from the newest payout's week.

    Mondays are regular, so this needs one row (ORDER BY period_start DESC LIMIT 1,
    served by payout_period_start), not a DISTINCT over the whole ledger.
    """
    latest = Payout.objects.order_by("-period_start").values_list("week_start_local", flat=True).first()
    if latest is None:
        return []
    return [latest - timedelta(weeks=back) for back in range(count)]


def payouts_of_week(*, payouts: QuerySet[Payout], monday: date) -> QuerySet[Payout]:
    """``payouts`` of the business week starting on local ``monday``, in every zone.

    A local Monday 00:00 is within 14 hours of Monday 00:00 UTC in any zone, so the
    period_start range lets payout_period_start serve the filter.
    """
    around = datetime.combine(monday, time(), tzinfo=UTC)
    return payouts.filter(
        week_start_local=monday,
        period_start__gte=around - timedelta(days=1),
        period_start__lt=around + timedelta(days=1),
    )


# --- The ledger invariant ---------------------------------------------------------------


def payout_paid_as_of() -> datetime | None:
    """The logical time of the latest scheduled weekly run that succeeded: every period
    finished by then must be paid (served by the claim key index)."""
    return (
        JobRun.objects.filter(job_name=PAYOUT_JOB, subject="", status=RunStatus.SUCCEEDED)
        .order_by("-scheduled_for")
        .values_list("scheduled_for", flat=True)
        .first()
    )


@dataclass(frozen=True)
class LedgerProblem:
    restaurant_id: int
    at: datetime  # the instant the problem is about (UTC)
    detail: str


def ledger_problems(*, paid_as_of: datetime | None, written_since: datetime | None = None) -> list[LedgerProblem]:
    """Everything wrong with the payout ledger, over every restaurant and its whole history.

    1. Contiguity: each restaurant's first payout covers its onboarding instant, and each
       later one starts exactly where the previous one ended (no gap, no overlap).
    2. Money: the gross of its payouts equals the totals of its orders delivered before its
       last payout's end (none is unpaid, none paid twice; an order delivered before the
       ledger's start counts as unpaid). That reads every delivered order and payout;
       with ``written_since`` (the hourly check) (1) and (2) cover only the payouts
       written since (and the orders before a ledger that starts with one of them): on
       PostgreSQL payouts and covered orders cannot change afterwards
       (``payouts/0004_ledger_guards``), so checking each payout once is the same.
    3. Completeness, when ``paid_as_of`` (the logical time of the latest successful
       weekly run) is given: no open ledger has a period finished by then still unpaid.
    """
    money = _ledger_money() if written_since is None else _ledger_money_since(since=written_since)
    return sorted(
        [*_ledger_seams(since=written_since), *money, *(_ledger_behind(as_of=paid_as_of) if paid_as_of else [])],
        key=lambda problem: (problem.at, problem.restaurant_id),
    )


def _ledger_seams(*, since: datetime | None = None) -> list[LedgerProblem]:
    """Each payout against the one before it; with ``since``, only those written since
    (each one's predecessor by the unique index (restaurant_id, period_start))."""
    fields = ("id", "restaurant_id", "period_start", "period_end", "previous_end", "restaurant__onboarded_at")
    if since is None:
        previous: Any = Window(Lag("period_end"), partition_by=[F("restaurant_id")], order_by=F("period_start").asc())
        payouts = Payout.objects.all()
    else:
        previous = Subquery(
            Payout.objects.filter(restaurant=OuterRef("restaurant_id"), period_start__lt=OuterRef("period_start"))
            .order_by("-period_start")
            .values("period_end")[:1]
        )
        payouts = Payout.objects.filter(created_at__gte=since)
    problems: list[LedgerProblem] = []
    for payout_id, restaurant_id, start, end, previous_end, onboarded_at in (
        payouts.annotate(previous_end=previous).order_by().values_list(*fields)
    ):
        if previous_end is None and not start <= onboarded_at < end:
            detail = f"the first payout ({payout_id}, {_utc(start)} to {_utc(end)}) does not cover the onboarding"
            problems.append(LedgerProblem(restaurant_id, start, f"{detail} at {_utc(onboarded_at)}"))
        elif previous_end is not None and previous_end != start:
            what = "unpaid" if previous_end < start else "paid twice"
            span = f"{_utc(min(previous_end, start))} to {_utc(max(previous_end, start))}"
            problems.append(LedgerProblem(restaurant_id, min(previous_end, start), f"{span} is {what}"))
    return problems


def _ledger_money() -> list[LedgerProblem]:
    earned = Order.objects.filter(
        restaurant=OuterRef("pk"), status=OrderStatus.DELIVERED, delivered_at__lt=OuterRef("paid_through")
    )
    rows = (
        Restaurant.objects.annotate(paid_through=_paid_through())
        .filter(paid_through__isnull=False)
        .annotate(
            paid=_per_restaurant(Payout.objects.filter(restaurant=OuterRef("pk")), Sum("gross")),
            earned=_per_restaurant(earned, Sum("total")),
        )
        .values_list("id", "paid_through", "paid", "earned")
    )
    return [
        LedgerProblem(
            rid,
            end,
            f"payouts up to {_utc(end)} have gross {cents(paid)}, its orders delivered before then total "
            f"{cents(earned)}",
        )
        for rid, end, paid, earned in rows
        if cents(paid) != cents(earned)
    ]


def _ledger_money_since(*, since: datetime) -> list[LedgerProblem]:
    in_bounds = Order.objects.filter(
        restaurant=OuterRef("restaurant_id"),
        status=OrderStatus.DELIVERED,
        delivered_at__gte=OuterRef("period_start"),
        delivered_at__lt=OuterRef("period_end"),
    )
    recent = Payout.objects.filter(created_at__gte=since).annotate(earned=_per_restaurant(in_bounds, Sum("total")))
    problems = [
        LedgerProblem(rid, start, f"payout {pid} has gross {cents(gross)}, its orders total {cents(earned)}")
        for pid, rid, start, gross, earned in recent.values_list(
            "id", "restaurant_id", "period_start", "gross", "earned"
        )
        if cents(gross) != cents(earned)
    ]
    first = Payout.objects.filter(restaurant=OuterRef("pk")).order_by("period_start")
    before = Order.objects.filter(
        restaurant=OuterRef("pk"), status=OrderStatus.DELIVERED, delivered_at__lt=OuterRef("first_start")
    )
    early = (
        Restaurant.objects.annotate(
            first_start=Subquery(first.values("period_start")[:1]),
            first_written=Subquery(first.values("created_at")[:1]),
        )
        .filter(first_start__isnull=False, first_written__gte=since)
        .annotate(n=_per_restaurant(before, Count("id")))
        .filter(n__gt=0)
        .values_list("id", "first_start", "n")
    )
    problems += [
        LedgerProblem(rid, start, f"{n} delivered orders before the ledger's start at {_utc(start)} are unpaid")
        for rid, start, n in early
    ]
    return problems


def _ledger_behind(*, as_of: datetime) -> list[LedgerProblem]:
    delay = timedelta(seconds=settings.PAYOUT_SETTLEMENT_DELAY_SECONDS)
    fields = ("id", "timezone", "onboarded_at", "deactivated_at", "paid_through")
    rows = payout_open_ledgers().values_list(*fields)  # paid_through: its annotation
    problems: list[LedgerProblem] = []
    for rid, zone, onboarded_at, deactivated_at, paid_through in rows:
        week = week_of(paid_through or onboarded_at, zone)
        start = paid_through or week.period_start
        if week.period_end + delay <= as_of and (deactivated_at is None or start < deactivated_at):
            detail = (
                f"{_utc(start)} to {_utc(week.period_end)} was finished by the run as of {_utc(as_of)} and is unpaid"
            )
            problems.append(LedgerProblem(rid, start, detail))
    return problems


def _utc(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


@dataclass(frozen=True)
class OrdersWaiting:
    restaurant_id: int
    paid_through: datetime | None
    order_count: int
    gross: Decimal


def payout_orders_waiting(*, restaurant_ids: Sequence[int] | None = None) -> list[OrdersWaiting]:
    """Per restaurant with an open ledger, the delivered orders its next payouts will pay
    (delivered at or after its last payout's end, or its onboarding when it has none):
    what a catch-up or the admin shows as waiting for their payout. One query; only
    restaurants with some are listed, in id order.

    Before its onboarding a restaurant takes no order and delivers none (refused by
    ``orders.services`` and, on PostgreSQL, a trigger), so this is every order a payout
    will pay, and none that no payout would (such an order, written before that refusal,
    is a problem of ``ledger_problems`` instead)."""
    restaurants = payout_open_ledgers()
    if restaurant_ids is not None:
        restaurants = restaurants.filter(id__in=restaurant_ids)
    waiting = Order.objects.filter(
        restaurant=OuterRef("pk"), status=OrderStatus.DELIVERED, delivered_at__gte=OuterRef("waiting_from")
    )
    rows = (
        restaurants.annotate(waiting_from=Coalesce(F("paid_through"), F("onboarded_at")))
        .annotate(n=_per_restaurant(waiting, Count("id")), gross=_per_restaurant(waiting, Sum("total")))
        .filter(n__gt=0)
        .order_by("id")
        .values_list("id", "paid_through", "n", "gross")
    )
    return [OrdersWaiting(rid, paid_through, n, cents(gross)) for rid, paid_through, n, gross in rows]


@dataclass(frozen=True)
class LedgerHoldings:
    """What a wipe of the ledger would destroy: counts, and the money already paid."""

    payouts: int
    paid_net: Decimal
    rate_changes: int
    restaurants: int
    orders: int
    delivered_orders: int

    @property
    def empty(self) -> bool:
        return not (self.payouts or self.rate_changes or self.restaurants or self.orders)

    def phrase(self) -> str:
        """``12 payouts (net 1,769.41 paid), 3 restaurants, 450 orders (400 delivered), 0 rate changes``."""
        return (
            f"{self.payouts} payouts (net {money_text(self.paid_net)} paid), {self.restaurants} restaurants, "
            f"{self.orders} orders ({self.delivered_orders} delivered), {self.rate_changes} rate changes"
        )


def ledger_holdings() -> LedgerHoldings:
    """Count what the ledger holds (``payouts.services.ledger_wipe`` names it before refusing)."""
    orders = Order.objects.aggregate(n=Count("id"), delivered=Count("id", filter=Q(status=OrderStatus.DELIVERED)))
    return LedgerHoldings(
        payouts=Payout.objects.count(),
        paid_net=cents(Payout.objects.aggregate(net=Sum("net"))["net"]),
        rate_changes=CommissionRateChange.objects.count(),
        restaurants=Restaurant.objects.count(),
        orders=orders["n"],
        delivered_orders=orders["delivered"],
    )


def payout_ledger_start() -> datetime | None:
    """The earliest restaurant onboarding (None: no restaurant): no payout run as of an
    earlier instant can pay anything (the payout job's ``earliest``)."""
    start: datetime | None = Restaurant.objects.aggregate(start=Min("onboarded_at"))["start"]
    return start
