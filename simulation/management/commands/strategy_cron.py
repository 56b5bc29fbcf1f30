"""``manage.py strategy_cron``: one server's cron line for the strategy probe, run the
way a strategy without claims runs it (see ``simulation.strategies``). ``simulate
--strategy`` starts one per server; it is not part of a Tiffin deployment."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import CommandError, CommandParser

from simulation.strategies import Strategy, cron_loop
from tiffin import clock
from tiffin.cli import TiffinCommand, parse_instant

NAIVE = [strategy.value for strategy in Strategy if strategy != Strategy.CLAIM]


class Command(TiffinCommand):
    help = (
        "Fire the strategy probe at every tick by this server's clock, under a strategy without claims "
        f"({', '.join(NAIVE)}), until SIGTERM or --until. Started by simulate --strategy."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--strategy", required=True, choices=NAIVE)
        parser.add_argument("--server", required=True, help="this server's name, recorded on each execution")
        parser.add_argument("--since", required=True, help="the first tick to fire (ISO 8601)")
        parser.add_argument("--until", help="fire the ticks before this instant (ISO 8601), then exit")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["server"].strip():
            raise CommandError("--server: give this server's name")
        # From the later of --since and now, taken before the line says it is ready: a
        # restarted line starts from the next tick (what came due while it was down is
        # gone), and a line that lags the clock after saying so still fires every tick.
        since = max(parse_instant(options["since"], option="--since"), clock.now())
        until = parse_instant(options["until"], option="--until") if options["until"] else None
        stop = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        # simulate reads the instant back: a line that came up after the window's start would
        # never fire the ticks before it, and its boot counts as too slow.
        self.stdout.write(
            f"{options['server']}: {options['strategy']} cron line ready, firing from {since.isoformat()}"
        )
        self.stdout.flush()
        cron_loop(Strategy(options["strategy"]), server=options["server"], stop=stop, since=since, until=until)
