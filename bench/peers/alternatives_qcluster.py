"""``manage.py qcluster`` for the alternatives table, with django-q2's scheduler called at
its cadence on the deployment's clock.

django-q2's guard loop runs the scheduler every 30 real seconds, a number it does not let
a setting change. Every other duration of the real tools' deployments is divided by the
clock's speed (bench/peers/alternatives.py), so this process also calls the same
``django_q.scheduler.scheduler`` every ``30 / speed`` seconds from a thread of the
cluster's leader (which a SIGSTOP or SIGKILL of the server's process group reaches too).
The scheduling itself is django-q2's, unchanged: the due Schedule rows taken with
``select_for_update`` in one transaction, a task enqueued for each, ``next_run`` moved on.
"""

from __future__ import annotations

import os
import threading
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.peers.alternatives_settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django_q.brokers import get_broker  # noqa: E402
from django_q.scheduler import scheduler  # noqa: E402

GUARD_SCHEDULER_SECONDS = 30.0  # django_q.cluster.Sentinel.guard: "Call scheduler once a minute (or so)"


def _scheduler_at_speed(speed: float) -> None:
    broker = get_broker()
    while True:
        time.sleep(GUARD_SCHEDULER_SECONDS / speed)
        scheduler(broker=broker)


if __name__ == "__main__":
    speed = float(os.environ.get("TIFFIN_CLOCK_SPEED", "1"))
    threading.Thread(target=_scheduler_at_speed, args=(speed,), daemon=True).start()
    call_command("qcluster")
