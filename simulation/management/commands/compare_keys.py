"""``manage.py compare_keys``: the usual idempotency keys of a provider call (none, a uuid4
per attempt, the fence) against Tiffin's transfer outbox, through the same faults, against
a real provider sandbox process (``simulation.key_strategies``). Exits 1 when Tiffin's row
has a doubled or a missing week."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser

from orders.models import Restaurant
from payouts.services import payouts_pay_due
from scheduling.fencing import fence_check
from scheduling.sql import next_fence
from simulation.key_strategies import FAULTS, STRATEGIES, compare_keys, key_table, tiffin_clean
from tiffin.cli import TiffinCommand, parse_instant
from transfers.models import Transfer

# Seeded up to this instant (a Sunday evening): the payout pass pays the weeks before it.
DEFAULT_NOW = datetime(2027, 3, 7, 20, 0, tzinfo=UTC)


class Command(TiffinCommand):
    help = (
        "Pay the same payouts with four ways of calling the provider (no key, a uuid4 per attempt, the fence as "
        "the key, Tiffin's transfer outbox) through the same faults, and print the doubled and missing "
        "restaurant-weeks counted at the provider. Seeds the database (refused if it holds data, unless --reset)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--restaurants", type=int, default=3, help="restaurants to seed (default 3)")
        parser.add_argument("--weeks", type=int, default=2, help="weeks of orders to seed (default 2)")
        parser.add_argument(
            "--now", help=f"ISO instant with offset to seed and pay up to (default {DEFAULT_NOW:%Y-%m-%dT%H:%MZ})"
        )
        parser.add_argument(
            "--strategies", default=",".join(STRATEGIES), help=f"comma-separated, of {', '.join(STRATEGIES)}"
        )
        parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
        parser.add_argument("--reset", action="store_true", help="delete the demo data and payouts first (DEBUG only)")
        parser.add_argument("--json", action="store_true", help="print the cells as JSON")  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        restaurants, weeks = options["restaurants"], options["weeks"]
        if not 1 <= restaurants <= 50:
            raise CommandError(f"--restaurants {restaurants}: give a number from 1 to 50")
        if not 1 <= weeks <= 8:
            raise CommandError(f"--weeks {weeks}: give a number from 1 to 8")
        strategies = chosen(options["strategies"], STRATEGIES, option="--strategies")
        faults = chosen(options["faults"], FAULTS, option="--faults")
        now = parse_instant(options["now"], option="--now", require_offset=True) if options["now"] else DEFAULT_NOW

        seed_and_pay(restaurants=restaurants, weeks=weeks, now=now, reset=options["reset"])
        if not Transfer.objects.exists():
            raise CommandError("the payout pass wrote no transfer (no week with a positive net): seed more weeks")
        say = (lambda line: print(line, file=sys.stderr)) if options["json"] else self.stdout.write
        cells = compare_keys(strategies=strategies, faults=faults, start=now, say=say)
        if options["json"]:
            self.stdout.write(json.dumps({"cells": [cell.as_json() for cell in cells]}, indent=2))
        else:
            self.stdout.write("\n".join(["", *key_table(cells)]))
        if not tiffin_clean(cells):
            raise CommandError("Tiffin's transfer outbox paid a week twice or not at all", returncode=1)


def chosen(value: str, known: tuple[str, ...], *, option: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise CommandError(f"{option} {value!r}: give a comma-separated list of {', '.join(known)}")
    return names


@dataclass(frozen=True)
class SeedRun:
    """The payout pass's run (``payouts.services.PayoutRun``): a fence of its own."""

    fence: int
    run_id: int | None
    now: datetime

    def fence_check(self, resource: str) -> None:
        fence_check(resource, self.fence, now=self.now, run_id=self.run_id)


def seed_and_pay(*, restaurants: int, weeks: int, now: datetime, reset: bool) -> None:
    """Orders (``seed_demo``), a provider account for every restaurant, then the payout
    pass, which writes each positive payout's transfer row in its transaction."""
    flags = ["--reset", "--delete-payouts"] if reset else []
    seed_args = ["--restaurants", str(restaurants), "--weeks", str(weeks), "--now", now.isoformat(), *flags]
    call_command("seed_demo", *seed_args, stdout=io.StringIO())
    for restaurant in Restaurant.objects.all():
        Restaurant.objects.filter(id=restaurant.id).update(provider_account=f"acct_Keys{restaurant.id}")
    payouts_pay_due(as_of=now, run=SeedRun(fence=next_fence(), run_id=None, now=now), now=now)
