from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from scheduling.execution import worker_name
from scheduling.loop import SchedulerLoop
from tiffin.cli import TiffinCommand


class Command(TiffinCommand):
    help = (
        "Run the scheduler loop: sleep to the next computed instant (next cron tick or due run), "
        "claim and enqueue, repeat. Run one per server; stops cleanly on SIGTERM or Ctrl-C."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        SchedulerLoop(name=f"scheduler@{worker_name()}", stop=stop).run_forever()
