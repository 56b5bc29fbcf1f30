"""Order traffic for the dinner-rush scenario and ``simulate``: customers place orders at
a sustained rate and restaurants answer most of them in time.

Every order goes through ``orders.services``, so each one gets its delayed cancellation
run in the same transaction, exactly as in production. Each order's fate is drawn when
it is placed: accepted or rejected after a delay inside the restaurant's time to
answer, or never answered (then only the engine's cancellation touches it).
"""

from __future__ import annotations

import heapq
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from orders.errors import OrderTransitionError
from orders.models import Restaurant
from orders.services import order_accept, order_place, order_reject
from tiffin import clock

# An answer comes at least this long after the order and this long before its deadline,
# so a restaurant that answers answers in time unless the machine itself lags.
ANSWER_MIN_SECONDS = 20
ANSWER_MARGIN_SECONDS = 90
# Real seconds the loop sleeps at most, so a stop request is seen promptly.
MAX_NAP = 0.05


@dataclass(frozen=True)
class TrafficPlan:
    orders_per_minute: float  # simulated minutes
    until: datetime
    accept_share: float = 0.8
    reject_share: float = 0.05
    seed: int = 7

    def __post_init__(self) -> None:
        if self.orders_per_minute <= 0:
            raise ValueError("orders_per_minute must be positive")
        if not 0 <= self.accept_share + self.reject_share <= 1 or min(self.accept_share, self.reject_share) < 0:
            raise ValueError("accept and reject shares must be fractions that add up to at most 1")


@dataclass
class TrafficReport:
    counts: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        keys = ("placed", "accepted", "rejected", "unanswered", "late_answer_refused", "failed_requests")
        return ", ".join(f"{self.counts[key]} {key.replace('_', ' ')}" for key in keys)


@dataclass(order=True)
class _Answer:
    at: datetime
    order_id: int = field(compare=False)
    accept: bool = field(compare=False)


class OrderTraffic:
    """Places orders and answers them as their fates say, until ``plan.until`` or ``stop``."""

    def __init__(self, *, plan: TrafficPlan, stop: threading.Event | None = None) -> None:
        self.plan = plan
        self.stop = stop or threading.Event()
        self.rng = random.Random(plan.seed)
        self.restaurants = list(Restaurant.objects.filter(is_active=True).order_by("id"))
        if not self.restaurants:
            raise ValueError("no active restaurant to order from: seed the database first (manage.py seed_demo)")
        self.answers: list[_Answer] = []
        self.report = TrafficReport()
        self.timeout = timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)

    def run(self) -> TrafficReport:
        next_order_at = clock.now()
        while not self.stop.is_set():
            now = clock.now()
            # Answers first: they have a deadline; a new order can wait a moment.
            if self.answers and self.answers[0].at <= now:
                self._request(partial(self.answer_one, heapq.heappop(self.answers), now=now))
                continue
            if now >= next_order_at and now < self.plan.until:
                self._request(partial(self.place_one, now=now))
                next_order_at += timedelta(seconds=self.rng.expovariate(self.plan.orders_per_minute / 60))
                continue
            if now >= self.plan.until and not self.answers:
                break
            self.stop.wait(self._nap(next_order_at, now))
        return self.report

    def _request(self, request: Callable[[], None]) -> None:
        """One customer's or restaurant's request. One the database drops (a terminated
        connection, a restart) fails like a web request would, with nothing committed,
        and the next one reconnects; its order, if it was an answer, stays unanswered."""
        try:
            request()
        except DatabaseError:
            self.report.counts["failed_requests"] += 1
            close_old_connections()  # the broken connection is closed; the next query opens one

    def _nap(self, next_order_at: datetime, now: datetime) -> float:
        """Real seconds until the next order or answer is due (at most MAX_NAP)."""
        pending = [next_order_at] if now < self.plan.until else []
        pending += [self.answers[0].at] if self.answers else []
        if not pending:
            return MAX_NAP
        return min(MAX_NAP, max(clock.real_seconds((min(pending) - now).total_seconds()), 0.0))

    def place_one(self, *, now: datetime) -> None:
        # Only restaurants already onboarded take orders (order_place refuses the others).
        open_now = [restaurant for restaurant in self.restaurants if restaurant.onboarded_at <= now]
        if not open_now:
            self.report.counts["no_restaurant_onboarded"] += 1
            return
        restaurant = self.rng.choice(open_now)
        total = Decimal(self.rng.randrange(850, 8500)).scaleb(-2)  # whole cents
        order = order_place(
            restaurant=restaurant, customer_ref=f"rush-{self.rng.randrange(10**5):05d}", total=total, now=now
        )
        self.report.counts["placed"] += 1
        fate = self.rng.random()
        if fate >= self.plan.accept_share + self.plan.reject_share:
            self.report.counts["unanswered"] += 1
            return
        latest = self.timeout.total_seconds() - ANSWER_MARGIN_SECONDS
        delay = timedelta(seconds=self.rng.uniform(ANSWER_MIN_SECONDS, max(latest, ANSWER_MIN_SECONDS)))
        heapq.heappush(self.answers, _Answer(now + delay, order.pk, accept=fate < self.plan.accept_share))

    def answer_one(self, answer: _Answer, *, now: datetime) -> None:
        action: Callable[..., object] = order_accept if answer.accept else order_reject
        try:
            action(order_id=answer.order_id, now=now)
        except OrderTransitionError:
            # The machine lagged past the deadline and the cancellation came first.
            self.report.counts["late_answer_refused"] += 1
            return
        self.report.counts["accepted" if answer.accept else "rejected"] += 1
