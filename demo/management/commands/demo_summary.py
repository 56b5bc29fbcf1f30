"""``manage.py demo_summary``: what is in the database, for people (or ``--json``)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import CommandParser

from demo.selectors import DemoSummary, demo_summary_get
from orders.selectors import order_cancellations_overview
from payouts.selectors import WeekRow, payout_weeks_table
from scheduling.models import JobRun
from scheduling.selectors import job_last_run
from tiffin import clock
from tiffin.cli import TiffinCommand

# The jobs whose latest run the summary shows, and the local weeks of the payout table.
JOBS = ("weekly-payouts", "clean-carts", "cancel-stale-orders")
WEEKS_SHOWN = 7


class Command(TiffinCommand):
    help = "Summarise restaurants, orders, carts and payouts in the database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    def handle(self, *args: Any, **options: Any) -> None:
        summary = demo_summary_get(now=clock.now(), stale_after=timedelta(days=settings.CART_STALE_DAYS))
        runs = {name: job_last_run(job_name=name) for name in JOBS}
        cancellations = order_cancellations_overview()
        weeks = payout_weeks_table(limit_weeks=WEEKS_SHOWN)
        if options["json"]:
            data = summary.as_json() | {"jobs": jobs_json(runs, cancellations, weeks)}
            self.stdout.write(json.dumps(data, indent=2))
        else:
            lines = render_text(summary) + render_jobs(runs, cancellations) + render_weeks(weeks)
            self.stdout.write("\n".join(lines))


def render_text(summary: DemoSummary) -> list[str]:
    zones = ", ".join(f"{zone} {n}" for zone, n in summary.restaurants_by_zone.items()) or "none"
    width = max(len(status) for status in summary.orders_by_status)
    lines = [
        f"Tiffin summary as of {summary.as_of:%Y-%m-%d %H:%M} UTC",
        f"Restaurants: {sum(summary.restaurants_by_zone.values())} ({zones})",
        f"Orders: {sum(summary.orders_by_status.values())}",
        *(f"  {status:<{width}}  {n:>8}" for status, n in summary.orders_by_status.items()),
        f"Delivered gross: {summary.delivered_gross}",
        f"Carts: {summary.carts.fresh + summary.carts.stale} ({summary.carts.fresh} fresh, "
        f"{summary.carts.stale} untouched for over {summary.stale_after.days} days)",
    ]
    payouts = summary.payouts
    if payouts.count:
        lines.append(
            f"Payouts: {payouts.count} (gross {payouts.gross}, commission {payouts.commission}, net {payouts.net})"
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
        return (
            f"{result['payouts_written']} payouts written for {result['restaurants']} restaurants "
            f"(gross {result['gross']}, commission {result['commission']}, net {result['net']})"
        )
    if name == "clean-carts":
        return (
            f"deleted {result['deleted_carts']} carts with {result['deleted_items']} items untouched since "
            f"{result['cutoff'][:16].replace('T', ' ')} UTC, in {result['batches']} batch(es)"
        )
    if name == "cancel-stale-orders":
        return f"cancelled {result['cancelled']} unanswered orders past their deadline whose delayed run was missing"
    return json.dumps(result)


def render_weeks(weeks: list[WeekRow]) -> list[str]:
    """Net payouts as a table: a row per restaurant, a column per local week."""
    if not weeks:
        return []
    mondays = sorted({row.week_start_local for row in weeks})
    table: dict[tuple[str, str], dict[Any, str]] = {}
    for row in weeks:
        table.setdefault((row.timezone, row.restaurant), {})[row.week_start_local] = f"{row.net:,.2f}"
    lines = [
        "",
        "Net payouts by restaurant and business week (local Monday; '-' no payout: before onboarding or not over yet):",
    ]
    lines.append(f"  {'restaurant':<22} {'zone':<17}" + "".join(f"{m:%d %b}".rjust(11) for m in mondays))
    for (zone, name), cells in table.items():
        lines.append(f"  {name[:22]:<22} {zone:<17}" + "".join(cells.get(m, "-").rjust(11) for m in mondays))
    return lines


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
