"""``manage.py demo_summary``: what is in the database, for people (or ``--json``)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import CommandParser

from demo.selectors import DemoSummary, demo_summary_get
from orders.selectors import order_cancellations_overview
from payouts.selectors import WeekRow, payout_weeks_table
from payouts.weeks import week_starting
from scheduling.models import JobRun
from scheduling.selectors import job_last_run
from tiffin import clock
from tiffin.cli import TiffinCommand
from tiffin.money import money_text

# The jobs whose latest run the summary shows, and the local weeks of the payout table.
JOBS = ("weekly-payouts", "clean-carts", "cancel-stale-orders")
WEEKS_SHOWN = 7


class Command(TiffinCommand):
    help = "Summarise restaurants, orders, carts and payouts in the database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    def handle(self, *args: Any, **options: Any) -> None:
        now = clock.now()
        summary = demo_summary_get(now=now, stale_after=timedelta(days=settings.CART_STALE_DAYS))
        runs = {name: job_last_run(job_name=name) for name in JOBS}
        cancellations = order_cancellations_overview()
        weeks = payout_weeks_table(limit_weeks=WEEKS_SHOWN)
        if options["json"]:
            data = summary.as_json() | {"jobs": jobs_json(runs, cancellations, weeks)}
            self.stdout.write(json.dumps(data, indent=2))
        else:
            lines = render_text(summary) + render_jobs(runs, cancellations) + render_weeks(weeks, now=now)
            self.stdout.write("\n".join(lines))


def render_text(summary: DemoSummary) -> list[str]:
    zones = ", ".join(f"{zone} {n}" for zone, n in summary.restaurants_by_zone.items()) or "none"
    width = max(len(status) for status in summary.orders_by_status)
    lines = [
        f"Tiffin summary as of {summary.as_of:%Y-%m-%d %H:%M} UTC",
        f"Restaurants: {sum(summary.restaurants_by_zone.values())} ({zones})",
        f"Orders: {sum(summary.orders_by_status.values())}",
        *(f"  {status:<{width}}  {n:>8}" for status, n in summary.orders_by_status.items()),
        f"Delivered gross: {money_text(summary.delivered_gross)}",
        f"Carts: {summary.carts.fresh + summary.carts.stale} ({summary.carts.fresh} fresh, "
        f"{summary.carts.stale} untouched for over {summary.stale_after.days} days)",
    ]
    payouts = summary.payouts
    if payouts.count:
        lines.append(
            f"Payouts: {payouts.count} (gross {money_text(payouts.gross)}, "
            f"commission {money_text(payouts.commission)}, net {money_text(payouts.net)})"
        )
    else:
        lines.append("Payouts: none yet")
    return lines


def render_jobs(runs: dict[str, JobRun | None], cancellations: dict[str, int]) -> list[str]:
    """What the latest run of each job did, in its own words (its result)."""
    lines = ["", "What the jobs did (latest run of each):"]
    for name, run in runs.items():
        if run is None:
            lines.append(f"  {name}: not run yet")
            continue
        lines.append(
            f"  {name}: run {run.id} ({run.trigger}) as of {run.scheduled_for:%Y-%m-%d %H:%M:%S} UTC, "
            f"{run.status}: {_describe(name, run.result) if run.result else run.error.strip()[-200:] or '-'}"
        )
    runs_by_status = ", ".join(
        f"{n} {k.removeprefix('runs_')}" for k, n in cancellations.items() if k != "cancelled_not_accepted_in_time"
    )
    cancelled = cancellations["cancelled_not_accepted_in_time"]
    delayed = runs_by_status or "none: the demo seed writes its orders directly, so the safety net above covered them"
    lines.append(
        f"  cancel-stale-order: a delayed run per order placed through order_place ({delayed}); "
        f"{cancelled} orders cancelled as not accepted in time in all"
    )
    return lines


def _describe(name: str, result: dict[str, Any]) -> str:
    if name == "weekly-payouts":
        written = result["payouts_written"]
        of_run = result.get("payouts_of_run", written)
        what = f"{written} payouts" if of_run == written else f"{of_run} payouts ({written} by its last attempt)"
        return (
            f"{what} written for {result['restaurants']} restaurants "
            f"(gross {money_text(result['gross'])}, commission {money_text(result['commission'])}, "
            f"net {money_text(result['net'])})"
        )
    if name == "clean-carts":
        return (
            f"deleted {result['deleted_carts']} carts with {result['deleted_items']} items untouched since "
            f"{result['cutoff'][:16].replace('T', ' ')} UTC, in {result['batches']} batch(es)"
        )
    if name == "cancel-stale-orders":
        return f"cancelled {result['cancelled']} unanswered orders past their deadline whose delayed run was missing"
    return json.dumps(result)


# What an empty cell of the payout table means (a week with no payout of the restaurant).
BEFORE_ONBOARDING, NOT_OVER, UNPAID = "-", "open", "unpaid"


def render_weeks(weeks: list[WeekRow], *, now: datetime) -> list[str]:
    """Net payouts as a table: a row per restaurant, a column per local week; a week with
    no payout says why (week_unpaid_reason)."""
    if not weeks:
        return []
    mondays = sorted({row.week_start_local for row in weeks})
    table: dict[tuple[str, str, int], dict[date, str]] = {}
    onboarded: dict[int, datetime] = {}
    for row in weeks:
        table.setdefault((row.timezone, row.restaurant, row.restaurant_id), {})[row.week_start_local] = money_text(
            row.net
        )
        onboarded[row.restaurant_id] = row.onboarded_at
    lines = [
        "",
        "Net payouts by restaurant and business week (local Monday). No payout: "
        f"'{BEFORE_ONBOARDING}' before onboarding, '{NOT_OVER}' the week is not over yet, "
        f"'{UNPAID}' over but not paid yet (a catch-up pays it: manage.py catch_up_payouts).",
    ]
    lines.append(f"  {'restaurant':<22} {'zone':<17}" + "".join(f"{m:%d %b}".rjust(11) for m in mondays))
    for (zone, name, restaurant_id), cells in table.items():
        row_cells = [
            cells.get(m) or week_unpaid_reason(monday=m, timezone=zone, onboarded_at=onboarded[restaurant_id], now=now)
            for m in mondays
        ]
        lines.append(f"  {name[:22]:<22} {zone:<17}" + "".join(cell.rjust(11) for cell in row_cells))
    return lines


def week_unpaid_reason(*, monday: date, timezone: str, onboarded_at: datetime, now: datetime) -> str:
    """Why a restaurant has no payout for the local week of ``monday``: it ended before
    the onboarding, it is not over as of ``now``, or it is over and waits for a catch-up."""
    week = week_starting(monday, timezone)
    if week.period_end <= onboarded_at:
        return BEFORE_ONBOARDING
    if week.period_end > now:
        return NOT_OVER
    return UNPAID


def jobs_json(runs: dict[str, JobRun | None], cancellations: dict[str, int], weeks: list[WeekRow]) -> dict[str, Any]:
    return {
        "latest_runs": {
            name: None
            if run is None
            else {
                "run": run.id,
                "scheduled_for": run.scheduled_for.isoformat(),
                "status": run.status,
                "result": run.result,
            }
            for name, run in runs.items()
        },
        "stale_order_cancellation": cancellations,
        "payouts_by_week": [
            {
                "restaurant": row.restaurant,
                "timezone": row.timezone,
                "week_start_local": row.week_start_local.isoformat(),
                "order_count": row.order_count,
                "gross": str(row.gross),
                "net": str(row.net),
            }
            for row in weeks
        ],
    }
