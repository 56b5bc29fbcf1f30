from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol, TypeVar

from django.conf import settings
from django.core.management.base import CommandParser
from django.db import connections

from scheduling.execution import worker_name
from scheduling.loop import SchedulerLoop
from scheduling.metrics import metrics_serve
from tiffin.cli import TiffinCommand

logger = logging.getLogger("scheduling.worker")

# A cluster whose first database connection is dropped while it starts (a failover, a
# restarted pooler, pg_terminate_backend) fails to start: django-q2's sentinel exits and
# Cluster.start raises. The worker tries again, a second later and then doubling, before it
# gives up (exit 1) and its supervisor takes over; chaos seed 18 lost a joining server's
# worker that way.
CLUSTER_START_ATTEMPTS = 5
CLUSTER_START_PAUSE_SECONDS = 1.0


class _Startable(Protocol):
    def start(self) -> int | None: ...


StartableT = TypeVar("StartableT", bound=_Startable)


def cluster_start(
    make: Callable[[], StartableT],
    *,
    attempts: int = CLUSTER_START_ATTEMPTS,
    pause: float = CLUSTER_START_PAUSE_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> StartableT:
    """``make()`` a cluster and start it, up to ``attempts`` times; the last failure raises."""
    for attempt in range(1, attempts):
        try:
            return _started(make)
        except RuntimeError as error:
            logger.warning("%s (attempt %d of %d); trying again in %.0f s", error, attempt, attempts, pause)
            sleep(pause)
            pause *= 2
    return _started(make)


def _started(make: Callable[[], StartableT]) -> StartableT:
    # The cluster forks its workers: no database connection may be shared across the fork.
    connections.close_all()
    cluster = make()
    cluster.start()
    return cluster


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

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        def keep_stop_signals() -> None:
            signal.signal(signal.SIGTERM, request_stop)
            signal.signal(signal.SIGINT, request_stop)

        def make() -> Cluster:
            # django-q2's Cluster takes SIGTERM and SIGINT for itself when it is made. A
            # signal while it started then stopped it and was spent there, and this process
            # went on to run the scheduler loop with no cluster under it. The signals stay
            # this process's: a stop asked at any moment is seen below, and stops both.
            cluster = Cluster()
            keep_stop_signals()
            return cluster

        keep_stop_signals()
        cluster = cluster_start(make)
        try:
            if settings.METRICS_ENABLED and settings.METRICS_WORKER_PORT:
                metrics_serve(host=settings.METRICS_WORKER_HOST, port=settings.METRICS_WORKER_PORT)
            if options["no_scheduler"]:
                while not stop.wait(1.0):
                    pass
            else:
                SchedulerLoop(name=f"scheduler@{worker_name()}", stop=stop).run_forever()
        finally:
            cluster.stop()
