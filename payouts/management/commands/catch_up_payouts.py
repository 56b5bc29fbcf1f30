"""``manage.py catch_up_payouts``: pay every finished, unpaid week now, by hand.

It claims a ``weekly-payouts`` run (trigger ``manual``) through the same claim as the
scheduler and executes it here, so the run, its fence and its payouts are recorded
exactly as a worker's would be. The claim key is (job, subject, as-of): the same
catch-up twice finds its claim taken and runs nothing; any later catch-up pays only
what is still unpaid.

Payout runs queue behind each other. A catch-up that would have to wait (another payout
run is running, or an older one is enqueued and no worker has taken it) is refused
before anything is claimed, naming the run it waits behind and how long that run has
been waiting or silent: a claim left waiting here would be paid by nobody if no worker
runs, and would make the same catch-up "already claimed" afterwards.

Exit status: 0 when the catch-up ran, or that exact catch-up had already succeeded; 1
when it was refused, failed, or its earlier claim has not succeeded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.core.management.base import CommandError, CommandParser, OutputWrapper

from orders.models import Restaurant
from orders.selectors import restaurants_by_id
from payouts.errors import PayoutError
from payouts.models import PAYOUT_JOB, Payout
from payouts.selectors import payout_orders_waiting, payouts_of_run, payouts_preview
from payouts.services import (
    BatchProgress,
    payout_catch_up_check,
    payout_catch_up_execute,
    payout_subject,
)
from payouts.sql import DuePayout
from scheduling.execution import worker_name
from scheduling.models import JobRun, RunStatus
from scheduling.selectors import RunState
from scheduling.services import RunCannotStartError, SchedulingError
from tiffin import clock
from tiffin.cli import JsonCommand, counted, parse_instant
from tiffin.money import money_text

# The progress display appears only once a catch-up has taken this long.
PROGRESS_AFTER_SECONDS = 0.5


class Command(JsonCommand):
    help = (
        "Pay every finished, unpaid business week as of --as-of (default: now) through a manual "
        "weekly-payouts run, and print what it paid per week and restaurant. Idempotent: the same "
        "catch-up twice pays nothing the second time."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--as-of", help="ISO instant to pay up to (default: now); not in the future")
        parser.add_argument(
            "--restaurant", type=int, nargs="+", dest="restaurants", metavar="ID", help="only these restaurants"
        )
        parser.add_argument("--dry-run", action="store_true", help="show what would be paid; write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        now = clock.now()
        as_of = parse_instant(options["as_of"], option="--as-of") if options["as_of"] else now.replace(microsecond=0)
        restaurants = options["restaurants"]
        if options["dry_run"]:
            self._dry_run(options, as_of=as_of, restaurants=restaurants, now=now)
            return
        try:
            with _progress_display(self.stderr) as progress:
                run = payout_catch_up_execute(
                    as_of=as_of, restaurant_ids=restaurants, now=now, worker=worker_name(), on_batch=progress
                )
        except RunCannotStartError as exc:
            self._cannot_start(options, exc, as_of=as_of)
        except (PayoutError, SchedulingError) as exc:  # a refused claim (an as-of before any onboarding)
            raise CommandError(str(exc)) from None
        if run is None:
            self._already_claimed(options, as_of=as_of, subject=payout_subject(restaurant_ids=restaurants), now=now)
            return
        self._report(options, run)

    def _cannot_start(self, options: dict[str, Any], exc: RunCannotStartError, *, as_of: datetime) -> None:
        if options["json"]:
            data = {
                "as_of": as_of.isoformat(),
                "ran": False,
                "claimed": False,
                "paid": 0,
                "waits_behind": [state.as_dict() for state in exc.waiting_on],
            }
            self.emit(options, data, "")
        raise CommandError(f"paid nothing: {exc}") from None

    def _dry_run(self, options: dict[str, Any], *, as_of: Any, restaurants: list[int] | None, now: Any) -> None:
        """What the real run would print (the same lines, names not ids), then the
        delivered orders still waiting for their payout; nothing is written."""
        try:
            payout_catch_up_check(as_of=as_of, restaurant_ids=restaurants, now=now)
        except PayoutError as exc:
            raise CommandError(str(exc)) from None
        due = payouts_preview(as_of=as_of, restaurant_ids=restaurants)
        waiting = payout_orders_waiting(restaurant_ids=restaurants)
        named = restaurants_by_id(restaurant_ids=[d.restaurant_id for d in due] + [w.restaurant_id for w in waiting])
        lines = sorted((_PayoutLine.of(d, named[d.restaurant_id]) for d in due), key=_PayoutLine.order)
        # By name like the payout lines, the id breaking ties between namesakes.
        waiting = sorted(waiting, key=lambda w: (named[w.restaurant_id].name, w.restaurant_id))
        waiting_rows = [
            {
                "restaurant": w.restaurant_id,
                "restaurant_name": named[w.restaurant_id].name,
                "paid_through": w.paid_through.isoformat() if w.paid_through else None,
                "orders": w.order_count,
                "gross": str(w.gross),
            }
            for w in waiting
        ]
        data = {
            "dry_run": True,
            "as_of": as_of.isoformat(),
            "would_pay": [line.as_dict() for line in lines],
            "waiting": waiting_rows,
        }
        text = [f"dry run as of {as_of.isoformat()}: {counted(len(lines), 'payout')} would be written"]
        text += _payout_lines(lines, paid="would pay")
        text.append(f"delivered orders waiting for their payout: {counted(len(waiting), 'restaurant')}")
        text += [
            f"    {named[w.restaurant_id].name[:28]:<28} paid through "
            f"{w.paid_through.isoformat() if w.paid_through else 'never paid':<25}  "
            f"{_orders(w.order_count)}  gross {money_text(w.gross):>12}"
            for w in waiting
        ]
        text.append("nothing written (dry run)")
        self.emit(options, data, "\n".join(text))

    def _already_claimed(self, options: dict[str, Any], *, as_of: datetime, subject: str, now: datetime) -> None:
        """The same catch-up again: a no-op once it succeeded (exit 0); otherwise the
        earlier claim has not paid yet, and the operator is told why (exit 1)."""
        existing = JobRun.objects.filter(job_name=PAYOUT_JOB, subject=subject, scheduled_for=as_of).first()
        status = existing.status if existing else "unknown"
        data = {"as_of": as_of.isoformat(), "subject": subject, "already_claimed": True, "status": status, "paid": 0}
        what = f"this catch-up (as of {as_of.isoformat()}{', ' + subject if subject else ''}) was already claimed"
        if existing is not None and existing.status == RunStatus.SUCCEEDED:
            self.emit(options, data, f"{what} as run {existing.id} (status: {status}); paid nothing")
            return
        if options["json"]:
            self.emit(options, data, "")
        state = RunState(run=existing, now=now).explained() if existing else "gone"
        raise CommandError(f"{what} as run {existing.id if existing else '?'}, which is {state}; paid nothing")

    def _report(self, options: dict[str, Any], run: JobRun) -> None:
        lines = [_PayoutLine.of(p, p.restaurant) for p in payouts_of_run(run_id=run.id)]
        data = {
            "run": run.id,
            "as_of": run.scheduled_for.isoformat(),
            "subject": run.subject,
            "status": run.status,
            "fence": run.fence,
            "result": run.result,
            "error": run.error,
            "payouts": [line.as_dict() for line in lines],
        }
        head = f"{PAYOUT_JOB} as of {run.scheduled_for.isoformat()}" + (f" ({run.subject})" if run.subject else "")
        text = [f"{head}: run {run.id}, fence {run.fence}, {run.status}", *_payout_lines(lines, paid="paid")]
        self.emit(options, data, "\n".join(text))
        if run.status != RunStatus.SUCCEEDED:
            raise CommandError(f"run {run.id} ended {run.status}: {_last_line(run.error)}")


@dataclass(frozen=True)
class _PayoutLine:
    """One payout as the command shows it, written (a Payout) or due (a dry run's preview)."""

    restaurant: Restaurant
    week_start_local: date
    period_start: datetime
    period_end: datetime
    order_count: int
    gross: Decimal
    commission: Decimal
    net: Decimal

    @classmethod
    def of(cls, row: Payout | DuePayout, restaurant: Restaurant) -> _PayoutLine:
        return cls(
            restaurant,
            *(row.week_start_local, row.period_start, row.period_end, row.order_count),
            *(row.gross, row.commission, row.net),
        )

    def order(self) -> tuple[date, str, int]:
        """The real run's order (``payouts_of_run``): by week, then restaurant name."""
        return (self.week_start_local, self.restaurant.name, self.restaurant.pk)

    def as_dict(self) -> dict[str, Any]:
        return {
            "restaurant": self.restaurant.pk,
            "restaurant_name": self.restaurant.name,
            "timezone": self.restaurant.timezone,
            "week_start_local": self.week_start_local.isoformat(),
            "period_start": self.period_start.isoformat(),
            "period_end": self.period_end.isoformat(),
            "order_count": self.order_count,
            "gross": str(self.gross),
            "commission": str(self.commission),
            "net": str(self.net),
        }


def _payout_lines(lines: list[_PayoutLine], *, paid: str) -> list[str]:
    """The payouts grouped by local week, one line each, then what they add up to."""
    if not lines:
        return [f"  {paid} nothing: every finished week was already paid"]
    text = []
    week = None
    for line in lines:
        if line.week_start_local != week:
            week = line.week_start_local
            text.append(f"  week of {week.isoformat()} (local Monday)")
        text.append(
            f"    {line.restaurant.name[:28]:<28} {line.restaurant.timezone:<20} {_orders(line.order_count)}  "
            f"gross {money_text(line.gross):>12}  commission {money_text(line.commission):>10}  "
            f"net {money_text(line.net):>12}"
        )
    weeks = counted(len({line.week_start_local for line in lines}), "week")
    restaurants = counted(len({line.restaurant.pk for line in lines}), "restaurant")
    gross, commission, net = (sum((getattr(line, money) for line in lines), Decimal("0.00")) for money in MONEY)
    text.append(
        f"  {paid} {counted(len(lines), 'payout')} ({restaurants}, {weeks}): gross {money_text(gross)}, "
        f"commission {money_text(commission)}, net {money_text(net)}"
    )
    return text


MONEY = ("gross", "commission", "net")


def _orders(count: int) -> str:
    return f"{count:>5} {'order ' if count == 1 else 'orders'}"


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else "no error recorded"


class _ProgressDisplay:
    """The run's per-batch progress (its ``on_batch``) as one updating line on stderr,
    once the catch-up has run for more than a moment."""

    def __init__(self, stream: OutputWrapper) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.shown = False

    def __call__(self, progress: BatchProgress) -> None:
        if time.monotonic() - self.started < PROGRESS_AFTER_SECONDS:
            return
        percent = 100 * progress.restaurants_done // max(progress.restaurants, 1)
        self.stream.write(
            f"\rpaying: {progress.restaurants_done}/{progress.restaurants} restaurants ({percent} %), "
            f"{progress.written} payouts written",
            ending="",
        )
        self.stream.flush()
        self.shown = True


@contextmanager
def _progress_display(stream: OutputWrapper) -> Iterator[_ProgressDisplay]:
    display = _ProgressDisplay(stream)
    try:
        yield display
    finally:
        if display.shown:
            stream.write("")
