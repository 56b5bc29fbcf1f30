"""``manage.py simulate_orders``: sustained order traffic against the configured database."""

from __future__ import annotations

import signal
import threading
from datetime import timedelta
from types import FrameType
from typing import Any

from django.core.management.base import CommandError, CommandParser

from simulation.traffic import OrderTraffic, TrafficPlan
from tiffin import clock
from tiffin.cli import TiffinCommand, parse_finite, parse_instant


class Command(TiffinCommand):
    help = (
        "Place orders at a sustained rate and let restaurants accept or reject most of them within "
        "their time to answer (the rest are left for the stale-order cancellation). Runs for --minutes "
        "of clock time (simulated minutes when the clock is accelerated), then waits for the answers "
        "it planned. Stops cleanly on SIGTERM or Ctrl-C and prints what it did."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--per-minute", type=parse_finite, default=20.0, help="orders per clock minute (default 20)"
        )
        parser.add_argument("--minutes", type=parse_finite, default=30.0, help="how long to place orders (default 30)")
        parser.add_argument(
            "--until",
            help="the clock instant (ISO 8601) at which to stop placing orders, instead of --minutes after the "
            "start: simulate gives it so that a slow start cannot push the last deadlines past its end",
        )
        parser.add_argument("--accept", type=parse_finite, default=0.8, help="share of orders accepted (default 0.8)")
        parser.add_argument("--reject", type=parse_finite, default=0.05, help="share of orders rejected (default 0.05)")
        parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["minutes"] <= 0:
            raise CommandError(f"--minutes {options['minutes']}: give a positive number")
        now = clock.now()
        until = now + timedelta(minutes=options["minutes"])
        if options["until"] is not None:
            until = parse_instant(options["until"], option="--until", require_offset=True)
        try:
            plan = TrafficPlan(
                orders_per_minute=options["per_minute"],
                until=until,
                accept_share=options["accept"],
                reject_share=options["reject"],
                seed=options["seed"],
            )
            traffic = OrderTraffic(plan=plan, stop=_stop_on_signals())
        except ValueError as error:
            raise CommandError(str(error)) from None
        report = traffic.run()
        self.stdout.write(f"order traffic: {report.line()}")


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop
