"""``manage.py seed_demo``: deterministic, realistic demo data.

Restaurants in three zones, weeks of orders with lunch and dinner peaks in each local
day, a realistic status mix with consistent timestamps, and carts of every age. With the
same ``--seed``, ``--now`` and settings the rows are identical (ids aside), so a demo or a
bug report can be reproduced exactly. Everything is written in one transaction: a run
that fails writes nothing.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.db import connection, transaction

from carts.models import Cart, CartItem
from orders.models import Order, OrderStatus, Restaurant
from payouts.errors import PayoutError
from payouts.selectors import LedgerHoldings
from payouts.services import ledger_wipe
from tiffin import clock
from tiffin.cli import TiffinCommand, parse_instant

ZONES = ("Asia/Kolkata", "Europe/London", "America/New_York")
NAMES = {
    "Asia/Kolkata": ["Masala Junction", "Dosa Darbar", "Biryani Bhavan", "Chaat Corner", "Tandoor Tales"],
    "Europe/London": ["The Curry Leaf", "Brick Lane Bites", "Camden Kitchen", "Soho Noodle Bar", "Thames Thali"],
    "America/New_York": ["Bowery Bowls", "Queens Dumpling Co", "Harlem Grill", "Midtown Tiffin", "Brooklyn Bao"],
}
COMMISSION_RATES = tuple(Decimal(rate) for rate in ("0.12", "0.15", "0.18", "0.20", "0.22", "0.25"))
# (sku, unit price in cents): cart lines.
MENU = (
    ("paneer-tikka", 899),
    ("masala-dosa", 650),
    ("chicken-biryani", 1299),
    ("dal-makhani", 799),
    ("garlic-naan", 299),
    ("mango-lassi", 399),
    ("veg-thali", 1150),
    ("pork-bao", 550),
    ("pad-thai", 1095),
    ("gulab-jamun", 450),
)
# Local opening hours, in minutes after midnight: 09:00 to midnight. No zone used here
# changes its clocks inside them (DST moves 01:00-03:00), so every local time exists once.
OPENS, CLOSES = 9 * 60, 24 * 60
# Local peaks (minutes after midnight) and their spread: lunch and dinner differ by zone.
LUNCH_PEAK = {"Asia/Kolkata": 13 * 60 + 30, "Europe/London": 12 * 60 + 45, "America/New_York": 12 * 60 + 30}
DINNER_PEAK = {"Asia/Kolkata": 21 * 60, "Europe/London": 19 * 60 + 30, "America/New_York": 19 * 60}
WEEKDAY_FACTOR = (0.85, 0.9, 0.95, 1.0, 1.3, 1.4, 1.15)  # Monday .. Sunday
CARTS_PER_RESTAURANT = 40
CUSTOMERS = 4000
BATCH_SIZE = 2000


@dataclass(frozen=True)
class SeedOptions:
    restaurants: int
    weeks: int
    seed: int
    now: datetime


@dataclass(frozen=True)
class SeedResult:
    options: SeedOptions
    zones: Counter[str]
    statuses: Counter[str]
    carts: int
    stale_carts: int
    items: int

    def paragraph(self) -> str:
        opts = self.options
        zones = ", ".join(f"{n} in {zone}" for zone, n in sorted(self.zones.items()))
        statuses = ", ".join(f"{self.statuses[s.value]} {s.value}" for s in OrderStatus)
        weeks = f"{opts.weeks} week" if opts.weeks == 1 else f"{opts.weeks} weeks"
        return (
            f"Seeded {opts.restaurants} restaurants ({zones}) onboarded {weeks} before "
            f"{opts.now.isoformat()}; {sum(self.statuses.values())} orders ({statuses}); "
            f"{self.carts} carts with {self.items} items, {self.stale_carts} of them untouched for over "
            f"{settings.CART_STALE_DAYS} days. Run again with --seed {opts.seed} --now {opts.now.isoformat()} "
            f"--reset for the same data."
        )


class Command(TiffinCommand):
    help = (
        "Fill an empty database with deterministic demo restaurants, orders and carts. "
        "--reset first deletes restaurants, orders and carts (job_runs are left alone), with development "
        "settings (DEBUG=1) only; a database that holds payouts also needs --delete-payouts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--restaurants", type=int, default=12, help="how many restaurants (default 12)")
        parser.add_argument("--weeks", type=int, default=6, help="weeks of order history (default 6)")
        parser.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
        parser.add_argument("--now", help="ISO instant with offset to seed up to (default: now, to the hour)")
        parser.add_argument(
            "--reset", action="store_true", help="delete existing demo data first (development settings only)"
        )
        parser.add_argument(
            "--delete-payouts",
            action="store_true",
            help="with --reset on a development database that holds payouts: delete them, with the orders "
            "they cover (without it such a reset is refused)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        opts = parse_options(options)
        if options["delete_payouts"] and not options["reset"]:
            raise CommandError("--delete-payouts goes with --reset")
        deleted = None
        with transaction.atomic():
            if options["reset"]:
                deleted = delete_demo_data(development=settings.DEBUG, delete_payouts=options["delete_payouts"])
            else:
                refuse_if_not_empty()
            result = seed(opts)
        if deleted is not None and not deleted.empty:
            self.stdout.write(f"Reset: deleted {deleted.phrase()}.")
        self.stdout.write(result.paragraph())


def parse_options(options: dict[str, Any]) -> SeedOptions:
    restaurants, weeks = options["restaurants"], options["weeks"]
    if not 1 <= restaurants <= 1000:
        raise CommandError(f"--restaurants {restaurants}: give a number from 1 to 1000")
    if not 1 <= weeks <= 104:
        raise CommandError(f"--weeks {weeks}: give a number from 1 to 104")
    now = (
        parse_instant(options["now"], option="--now", require_offset=True)
        if options["now"]
        else clock.now().replace(minute=0, second=0, microsecond=0)
    )
    return SeedOptions(restaurants=restaurants, weeks=weeks, seed=options["seed"], now=now)


def refuse_if_not_empty() -> None:
    counts = {
        "restaurants": Restaurant.objects.count(),
        "orders": Order.objects.count(),
        "carts": Cart.objects.count(),
    }
    if any(counts.values()):
        found = ", ".join(f"{n} {what}" for what, n in counts.items())
        raise CommandError(f"the database is not empty ({found}); pass --reset to delete them first")


def delete_demo_data(*, development: bool, delete_payouts: bool) -> LedgerHoldings:
    """Delete the ledger (payouts with the orders they cover, ``ledger_wipe``) and the
    carts; outside development settings, refuse unless there is nothing to delete.
    job_runs belong to the engine: untouched. Returns what the ledger held."""
    try:
        deleted = ledger_wipe(development=development, delete_payouts=delete_payouts)
    except PayoutError as error:
        raise CommandError(f"--reset: {error}") from None
    carts = Cart.objects.count()
    if carts and not development:
        raise CommandError(
            f"--reset: refusing to delete {carts} carts outside development settings (DEBUG is off); "
            "nothing was deleted"
        )
    Cart.objects.all().delete()  # items go with their carts
    return deleted


def seed(opts: SeedOptions) -> SeedResult:
    rng = random.Random(opts.seed)
    restaurants = make_restaurants(rng, opts)
    Restaurant.objects.bulk_create(restaurants, batch_size=BATCH_SIZE)
    orders = [order for restaurant in restaurants for order in make_orders(rng, restaurant, opts.now)]
    orders.sort(key=lambda order: (order.placed_at, order.restaurant.name))  # ids follow time
    Order.objects.bulk_create(orders, batch_size=BATCH_SIZE)
    carts = make_carts(rng, opts)
    items = save_carts(carts)
    stale_before = opts.now - timedelta(days=settings.CART_STALE_DAYS)
    return SeedResult(
        options=opts,
        zones=Counter(restaurant.timezone for restaurant in restaurants),
        statuses=Counter(order.status for order in orders),
        carts=len(carts),
        stale_carts=sum(1 for cart, _ in carts if cart.updated_at < stale_before),
        items=items,
    )


def make_restaurants(rng: random.Random, opts: SeedOptions) -> list[Restaurant]:
    onboarded_at = opts.now - timedelta(weeks=opts.weeks)
    restaurants = []
    for index in range(opts.restaurants):
        zone = ZONES[index % len(ZONES)]
        names = NAMES[zone]
        # Cycle through the zone's names; past the list, number them ("Harlem Grill 2").
        round_, position = divmod(index // len(ZONES), len(names))
        name = names[position] if round_ == 0 else f"{names[position]} {round_ + 1}"
        restaurants.append(
            Restaurant(
                name=name,
                timezone=zone,
                commission_rate=rng.choice(COMMISSION_RATES),
                onboarded_at=onboarded_at,
                # Connected and reachable, as a restaurant taking payouts is: its transfers
                # and statements leave instead of waiting for an account or an address.
                provider_account=f"acct_demo{index + 1}",
                statement_email=f"kitchen-{index + 1}@demo.tiffin.invalid",
            )
        )
    return restaurants


def make_orders(rng: random.Random, restaurant: Restaurant, now: datetime) -> Iterator[Order]:
    """Every order of one restaurant from its onboarding to ``now``, plus a few in flight."""
    zone = ZoneInfo(restaurant.timezone)
    popularity = rng.uniform(18, 42)  # orders on an ordinary day
    day = restaurant.onboarded_at.astimezone(zone).date()
    while day <= now.astimezone(zone).date():
        count = round(popularity * WEEKDAY_FACTOR[day.weekday()] * rng.uniform(0.8, 1.2))
        for _ in range(count):
            placed_at = local_instant(day, minute_of_day(rng, restaurant.timezone), rng.randrange(60), zone)
            order = make_order(rng, restaurant, placed_at, now)
            if restaurant.onboarded_at <= placed_at <= now:
                yield order
        day += timedelta(days=1)
    yield from in_flight_orders(rng, restaurant, now, zone)


def in_flight_orders(rng: random.Random, restaurant: Restaurant, now: datetime, zone: ZoneInfo) -> Iterator[Order]:
    # When the restaurant is open: one order still waiting for its answer and a few from
    # the last 45 minutes, so the demo always has placed and accepted orders for the
    # stale-order jobs and the admin actions.
    local = now.astimezone(zone)
    if not OPENS <= local.hour * 60 + local.minute < CLOSES:
        return
    yield Order(
        restaurant=restaurant,
        customer_ref=f"cust-{rng.randrange(1, CUSTOMERS):05d}",
        total=order_total(rng),
        placed_at=now - timedelta(seconds=rng.randint(30, 8 * 60)),
        status=OrderStatus.PLACED,
    )
    for _ in range(rng.randint(1, 3)):
        yield make_order(rng, restaurant, now - timedelta(seconds=rng.randint(60, 45 * 60)), now)


def minute_of_day(rng: random.Random, zone: str) -> float:
    draw = rng.random()
    if draw < 0.42:
        minute = rng.gauss(LUNCH_PEAK[zone], 40)
    elif draw < 0.88:
        minute = rng.gauss(DINNER_PEAK[zone], 55)
    else:
        minute = rng.uniform(OPENS, CLOSES)
    return min(max(minute, OPENS), CLOSES - 1)


def local_instant(day: date, minute: float, second: int, zone: ZoneInfo) -> datetime:
    # Wall-clock arithmetic in the zone, then UTC: 19:30 in London is 19:30 in summer too.
    local = datetime.combine(day, time(), tzinfo=zone) + timedelta(minutes=int(minute), seconds=second)
    return local.astimezone(UTC)


def make_order(rng: random.Random, restaurant: Restaurant, placed_at: datetime, now: datetime) -> Order:
    """One order with its whole life drawn up front, then cut at ``now``: a step that would
    happen after ``now`` has not happened yet, so timestamps are always consistent."""
    order = Order(
        restaurant=restaurant,
        customer_ref=f"cust-{rng.randrange(1, CUSTOMERS):05d}",
        total=order_total(rng),
        placed_at=placed_at,
        status=OrderStatus.PLACED,
    )
    draw = rng.random()
    if draw < 0.04:
        reject(order, placed_at + timedelta(seconds=rng.randint(45, 420)), now)
    elif draw < 0.055:
        cancel(order, placed_at + timedelta(seconds=rng.randint(60, 300)), "cancelled by the customer", now)
    elif draw < 0.07:
        timeout = timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)
        cancel(order, placed_at + timeout, f"not accepted within {timeout.total_seconds() / 60:g} minutes", now)
    else:
        accepted_at = placed_at + timedelta(seconds=rng.randint(30, 360))
        deliver(order, accepted_at, accepted_at + timedelta(seconds=rng.randint(18 * 60, 55 * 60)), now)
    return order


def reject(order: Order, at: datetime, now: datetime) -> None:
    if at <= now:
        order.status, order.rejected_at = OrderStatus.REJECTED, at


def cancel(order: Order, at: datetime, reason: str, now: datetime) -> None:
    if at <= now:
        order.status, order.cancelled_at, order.cancel_reason = OrderStatus.CANCELLED, at, reason


def deliver(order: Order, accepted_at: datetime, delivered_at: datetime, now: datetime) -> None:
    if accepted_at <= now:
        order.status, order.accepted_at = OrderStatus.ACCEPTED, accepted_at
    if delivered_at <= now:
        order.status, order.delivered_at = OrderStatus.DELIVERED, delivered_at


def order_total(rng: random.Random) -> Decimal:
    # Drawn as whole cents (log-normal around 24.00, within 8.50 to 85.00), so the Decimal
    # is exact: no float ever becomes money.
    cents = round(rng.lognormvariate(math.log(2400), 0.55))
    return Decimal(min(max(cents, 850), 8500)).scaleb(-2)


def make_carts(rng: random.Random, opts: SeedOptions) -> list[tuple[Cart, list[CartItem]]]:
    stale_days = settings.CART_STALE_DAYS
    carts = []
    for _ in range(opts.restaurants * CARTS_PER_RESTAURANT):
        draw = rng.random()
        if draw < 0.3:  # touched in the last two days
            age = rng.randint(60, 2 * 86400)
        elif draw < 0.5:  # quiet, but not yet stale
            age = rng.randint(2 * 86400, stale_days * 86400 - 3600)
        else:  # abandoned: what the nightly clean-up deletes
            age = rng.randint(stale_days * 86400 + 3600, (stale_days + 60) * 86400)
        updated_at = opts.now - timedelta(seconds=age)
        lifetime = rng.randint(60, 3 * 86400) if rng.random() < 0.2 else rng.randint(60, 2 * 3600)
        cart = Cart(
            customer_ref=f"cust-{rng.randrange(1, CUSTOMERS):05d}",
            created_at=updated_at - timedelta(seconds=lifetime),
            updated_at=updated_at,
        )
        carts.append((cart, make_items(rng)))
    return carts


def make_items(rng: random.Random) -> list[CartItem]:
    lines = rng.choices((1, 2, 3, 4, 5), weights=(30, 30, 20, 12, 8))[0]
    return [
        CartItem(
            sku=sku,
            quantity=rng.choices((1, 2, 3, 4), weights=(60, 25, 10, 5))[0],
            unit_price=Decimal(cents).scaleb(-2),
        )
        for sku, cents in rng.sample(MENU, lines)
    ]


def save_carts(carts: list[tuple[Cart, list[CartItem]]]) -> int:
    """Insert the carts, then their items; returns the number of items."""
    only_carts = [cart for cart, _ in carts]
    if connection.features.can_return_rows_from_bulk_insert:
        Cart.objects.bulk_create(only_carts, batch_size=BATCH_SIZE)
    else:  # old SQLite: bulk inserts do not return ids, and the items need them
        for cart in only_carts:
            cart.save()
    items = []
    for cart, cart_items in carts:
        for item in cart_items:
            item.cart = cart
            items.append(item)
    CartItem.objects.bulk_create(items, batch_size=BATCH_SIZE)
    return len(items)
