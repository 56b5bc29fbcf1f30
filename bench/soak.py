"""Soak: weeks of order traffic and every job with retention shortened to 3 days.

The engine's own code in one process on a stepped clock: every step (5 simulated minutes,
the finest cron period), under ``time_machine`` (which stops every clock, django-q2's
included, at the step), the step's orders are placed, answered and delivered through
``orders.services`` at their own instants, one scheduler pass runs
(``tick_pass``), and the queued django-q2 tasks are executed here, as a worker would
(``scheduling.tasks.execute_runs``). ``prune-history`` runs hourly through its normal
claim like every other job. Concurrency and faults are the scenarios' business
(tests/scenarios/); this is about what months do to the tables.

Retention: finished and dead runs, alerts and nodes 3 days; the look-back 2 days and the
check's window 1 day, so the claim guard horizon is 3 days. ``weekly-payouts`` keeps
every run by design.

Printed per simulated day: the rows of job_runs, job_run_events, the django-q2 queue,
alerts, orders and payouts. Checked at the end (exit 1 if any fails):

- no (job, subject, tick) was ever claimed twice, before or after its row was pruned;
- every cron tick of the whole period was claimed exactly once;
- the missed-run check at the end sees no tick never claimed (pruning left no false gap);
- nothing is left live except runs due after the end;
- no order is unanswered past its deadline, none accepted and cancelled;
- every payout's amounts are those of its orders, and no (restaurant, week) is paid twice;
- job_runs and job_run_events reach a plateau: over the last 7 days each count stays
  within 10 % of its mean.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tiffin_soak python -m bench.soak --reset [--days 30]

It migrates that database and, with --reset, empties its restaurants, orders, payouts
and engine tables first: give it a database of its own.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from bench.common import django_setup

RETENTION = {
    "SCHEDULER_RUN_RETENTION_DAYS": "3",
    "SCHEDULER_DEAD_RUN_RETENTION_DAYS": "3",
    "SCHEDULER_ALERT_RETENTION_DAYS": "3",
    "SCHEDULER_NODE_RETENTION_DAYS": "3",
    "SCHEDULER_LOOKBACK_SECONDS": str(2 * 86400),
    "SCHEDULER_CHECK_WINDOW_SECONDS": "86400",
    "LOG_LEVEL": "WARNING",
}
START = datetime(2027, 1, 4, 0, 0, tzinfo=UTC)  # a Monday: whole business weeks
PLATEAU_DAYS = 7
PLATEAU_SPREAD = 0.10


def main() -> int:
    parser = argparse.ArgumentParser(description="Soak: days of traffic and every job, retention 3 days.")
    parser.add_argument("--days", type=int, default=30, help="simulated days (default 30)")
    parser.add_argument("--orders-per-minute", type=float, default=0.5, help="order traffic (default 0.5)")
    parser.add_argument("--step-minutes", type=int, default=5, help="simulated minutes per step (default 5)")
    parser.add_argument("--reset", action="store_true", help="first empty the restaurants, orders and engine tables")
    args = parser.parse_args()
    if not 8 <= args.days <= 120:
        parser.error("--days: give 8 to 120 (the plateau is judged over the last 7)")
    if "DATABASE_URL" not in os.environ:
        parser.error("set DATABASE_URL to a PostgreSQL database of its own (make soak does)")
    django_setup(os.environ["DATABASE_URL"], **RETENTION)  # the benchmarks' key and settings
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    step = timedelta(minutes=args.step_minutes)
    return Soak(days=args.days, orders_per_minute=args.orders_per_minute, step=step).run(reset=args.reset)


class Soak:
    def __init__(self, *, days: int, orders_per_minute: float, step: timedelta) -> None:
        self.step = step
        self.end = START + timedelta(days=days)
        self.rate = orders_per_minute
        self.rng = random.Random(11)
        self.claims: Counter[tuple[str, str, datetime]] = Counter()
        self.cron_claims: Counter[tuple[str, datetime]] = Counter()
        self.last_run_id = 0
        self.answers: list[tuple[datetime, int, str]] = []
        self.days: list[dict[str, int]] = []
        self.restaurants: list[Any] = []

    def run(self, *, reset: bool) -> int:
        import time_machine

        self._prepare(reset=reset)
        began = time.monotonic()
        now = START
        while now < self.end:
            now += self.step
            with time_machine.travel(now, tick=False):
                self._step(now)
            if (now - START) % timedelta(days=1) == timedelta(0):
                self._day(now, elapsed=time.monotonic() - began)
        problems = self._check(now)
        print(f"\n{(self.end - START).days} simulated days in {time.monotonic() - began:.0f} s real time")
        for line in problems or ["every invariant held"]:
            print(("FAIL  " if problems else "OK    ") + line)
        return 1 if problems else 0

    def _prepare(self, *, reset: bool) -> None:
        from django.conf import settings

        from orders.models import Restaurant
        from orders.services import restaurant_create
        from payouts.errors import PayoutError
        from payouts.services import ledger_wipe
        from scheduling.schedules import schedules_register
        from simulation.services import SimulationResetError, simulation_reset

        if Restaurant.objects.exists() and not reset:
            sys.exit("the database already has restaurants; pass --reset to empty it first (a database of its own)")
        try:  # refused outside DEBUG=1 unless the database is empty (make soak creates it afresh)
            ledger_wipe(development=settings.DEBUG, delete_payouts=True)  # payouts with their orders
            simulation_reset(development=settings.DEBUG)
        except (PayoutError, SimulationResetError) as error:
            sys.exit(f"--reset: {error}")
        # Registered at the start, so the first tick after it is due (none at or before it).
        schedules_register(now=START)
        for n, zone in enumerate(("UTC", "Asia/Kolkata", "America/New_York", "Europe/London")):
            restaurant_create(
                name=f"Soak {n}", timezone=zone, commission_rate=Decimal("0.15"), onboarded_at=START - timedelta(days=7)
            )
        print(f"soak from {START:%Y-%m-%d} for {(self.end - START).days} simulated days; retention: {RETENTION}")
        print(f"{'day':>4} " + " ".join(f"{name:>{width}}" for name, width in _WIDTHS) + f" {'real s':>7}")

    # -- one step

    def _step(self, now: datetime) -> None:
        """The step's orders and answers at their own instants, then one pass at ``now``:
        an answer (at most 8 minutes after its order) always comes before the pass that
        finds the order's cancellation due (10 minutes after it)."""
        from scheduling.dispatch import tick_pass

        span = self.step.total_seconds()
        placed = sorted(
            now - timedelta(seconds=self.rng.uniform(0, span)) for _ in range(self._poisson(self.rate * span / 60))
        )
        for at in placed:
            self._answer(at)
            self._place(at)
        self._answer(now)
        tick_pass(now=now)
        self._drain()
        self._record_claims()

    def _poisson(self, mean: float) -> int:
        count, limit, product = 0, 2.718281828459045**-mean, self.rng.random()
        while product > limit:
            count += 1
            product *= self.rng.random()
        return count

    def _place(self, now: datetime) -> None:
        from orders.models import Restaurant
        from orders.services import order_place

        if not self.restaurants:
            self.restaurants = list(Restaurant.objects.order_by("id"))
        restaurant = self.rng.choice(self.restaurants)
        total = Decimal(self.rng.randrange(850, 8500)).scaleb(-2)
        customer = f"soak-{self.rng.randrange(10**5):05d}"
        order = order_place(restaurant=restaurant, customer_ref=customer, total=total, now=now)
        fate = self.rng.random()
        if fate < 0.8:
            self.answers.append((now + timedelta(minutes=self.rng.uniform(1, 8)), order.pk, "accept"))
        elif fate < 0.85:
            self.answers.append((now + timedelta(minutes=self.rng.uniform(1, 8)), order.pk, "reject"))
        self.answers.sort()

    def _answer(self, now: datetime) -> None:
        from orders import services

        actions = {"accept": services.order_accept, "reject": services.order_reject, "deliver": services.order_deliver}
        while self.answers and self.answers[0][0] <= now:
            at, order_id, action = self.answers.pop(0)
            actions[action](order_id=order_id, now=at)
            if action == "accept":
                self.answers.append((at + timedelta(minutes=30), order_id, "deliver"))
                self.answers.sort()

    def _drain(self) -> None:
        """Execute the queued tasks here, oldest first, as a worker would (a task may queue another)."""
        from django.utils.module_loading import import_string
        from django_q.models import OrmQ
        from django_q.signing import SignedPackage

        while (entry := OrmQ.objects.order_by("id").first()) is not None:
            task = SignedPackage.loads(entry.payload)
            entry.delete()
            import_string(task["func"])(*task["args"], **task["kwargs"])

    def _record_claims(self) -> None:
        """Every row inserted since the last minute, by claim key: a key seen twice was
        claimed again (the unique key can only allow that once its first row was pruned)."""
        from scheduling.models import JobRun, Trigger

        rows = JobRun.objects.filter(id__gt=self.last_run_id).values_list(
            "id", "job_name", "subject", "scheduled_for", "trigger"
        )
        for run_id, job_name, subject, scheduled_for, trigger in rows.order_by("id"):
            self.claims[(job_name, subject, scheduled_for)] += 1
            if trigger == Trigger.CRON:
                self.cron_claims[(job_name, scheduled_for)] += 1
            self.last_run_id = max(self.last_run_id, run_id)

    # -- reports and checks

    def _day(self, now: datetime, *, elapsed: float) -> None:
        from django_q.models import OrmQ

        from orders.models import Order
        from payouts.models import Payout
        from scheduling.models import JobRun, JobRunEvent, RunAlert

        counts = {
            "job_runs": JobRun.objects.count(),
            "events": JobRunEvent.objects.count(),
            "queue": OrmQ.objects.count(),
            "alerts": RunAlert.objects.count(),
            "orders": Order.objects.count(),
            "payouts": Payout.objects.count(),
        }
        self.days.append(counts)
        day = (now - START).days
        print(f"{day:>4} " + " ".join(f"{counts[k]:>{w}}" for k, w in _WIDTHS) + f" {elapsed:>7.0f}", flush=True)

    def _check(self, end: datetime) -> list[str]:
        return [
            *self._check_claims(end),
            *self._check_live(end),
            *self._check_orders(end),
            *self._check_payouts(),
            *self._check_plateau(),
        ]

    def _check_claims(self, end: datetime) -> list[str]:
        from operations.monitoring import runs_check
        from scheduling import cron
        from scheduling.models import ProblemKind
        from scheduling.registry import registry

        problems = [f"claimed {n} times: {key}" for key, n in self.claims.items() if n > 1][:20]
        for job in registry.cron_jobs():
            expected = set(cron.ticks_between(job.cron, job.timezone, START, end))
            claimed = {tick for (name, tick) in self.cron_claims if name == job.name}
            if expected != claimed:
                problems.append(
                    f"{job.name}: {len(expected - claimed)} ticks never claimed, {len(claimed - expected)} extra"
                )
        with _frozen(end):
            gaps = [p for p in runs_check(now=end) if p.kind == ProblemKind.NEVER_CLAIMED]
        problems += [f"the check sees a gap: {p}" for p in gaps[:10]]
        print(
            f"claims: {sum(self.claims.values())} over the period, "
            f"the most for one key: {max(self.claims.values(), default=0)}"
        )
        return problems

    def _check_live(self, end: datetime) -> list[str]:
        from scheduling.models import FINAL_STATUSES, JobRun, RunStatus

        live = JobRun.objects.exclude(status__in=FINAL_STATUSES).exclude(status=RunStatus.SCHEDULED, due_at__gt=end)
        dead = JobRun.objects.filter(status=RunStatus.DEAD).count()
        return [f"left live: {run}: {run.status}" for run in live[:10]] + ([f"{dead} dead runs"] if dead else [])

    def _check_orders(self, end: datetime) -> list[str]:
        from django.conf import settings

        from orders.models import Order, OrderStatus

        deadline = end - timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS) - self.step
        overdue = Order.objects.filter(status=OrderStatus.PLACED, placed_at__lt=deadline).count()
        both = Order.objects.filter(accepted_at__isnull=False, cancelled_at__isnull=False).count()
        cancelled = Order.objects.filter(status=OrderStatus.CANCELLED).count()
        print(f"orders: {Order.objects.count()} placed, {cancelled} cancelled as unanswered")
        return (
            [f"orders: {overdue} unanswered past their deadline, {both} accepted and cancelled"]
            if overdue or both
            else []
        )

    def _check_payouts(self) -> list[str]:
        from payouts.models import Payout
        from payouts.selectors import ledger_problems
        from scheduling.models import JobRun
        from simulation.report import payout_mismatch

        payouts = list(Payout.objects.select_related("restaurant"))
        problems = [line for payout in payouts if (line := payout_mismatch(payout))]
        problems += [f"ledger: restaurant {p.restaurant_id}: {p.detail}" for p in ledger_problems(paid_as_of=None)]
        runs = JobRun.objects.filter(job_name="weekly-payouts").count()
        referenced = Payout.objects.filter(job_run__isnull=False).values("job_run").distinct().count()
        print(f"payouts: {len(payouts)}, written by {referenced} runs; weekly-payouts runs kept: {runs}")
        return problems

    def _check_plateau(self) -> list[str]:
        problems = []
        last = self.days[-PLATEAU_DAYS:]
        for table in ("job_runs", "events"):
            counts = [day[table] for day in last]
            mean = statistics.mean(counts)
            spread = (max(counts) - min(counts)) / mean if mean else 0.0
            print(
                f"plateau: {table} over the last {PLATEAU_DAYS} days "
                f"{min(counts)}..{max(counts)} ({spread:.1%} of the mean)"
            )
            if spread > PLATEAU_SPREAD:
                problems.append(f"{table} did not level off: {counts}")
        return problems


_WIDTHS = (("job_runs", 9), ("events", 9), ("queue", 6), ("alerts", 6), ("orders", 7), ("payouts", 7))


def _frozen(at: datetime) -> Any:
    import time_machine

    return time_machine.travel(at, tick=False)


if __name__ == "__main__":
    sys.exit(main())
