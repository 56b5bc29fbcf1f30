from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import CommandParser
from django.db import connections

from scheduling.execution import worker_name
from scheduling.loop import SchedulerLoop
from scheduling.metrics import metrics_serve
from tiffin.cli import TiffinCommand

logger = logging.getLogger("scheduling.worker")


class Command(TiffinCommand):
    help = (
        "The one process each server runs besides the web server: a django-q2 cluster that "
        "executes runs, plus the scheduler loop. Stops both cleanly on SIGTERM or Ctrl-C."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-scheduler", action="store_true", help="run only the django-q2 cluster")

    def handle(self, *args: Any, **options: Any) -> None:
        from django_q.cluster import Cluster

        stop = threading.Event()
        # The cluster forks its workers: no database connection may be shared across the fork.
        connections.close_all()
        cluster = Cluster()
        cluster.start()
        if settings.METRICS_ENABLED and settings.METRICS_WORKER_PORT:
            metrics_serve(host=settings.METRICS_WORKER_HOST, port=settings.METRICS_WORKER_PORT)

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        try:
            if options["no_scheduler"]:
                while not stop.wait(1.0):
                    pass
            else:
                SchedulerLoop(name=f"scheduler@{worker_name()}", stop=stop).run_forever()
        finally:
            cluster.stop()
