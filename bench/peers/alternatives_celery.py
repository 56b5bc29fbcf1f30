"""Celery for the alternatives table (bench/peers/alternatives.py): ``celery beat`` and a
worker on every server, on Redis database 10 unless TIFFIN_ALTERNATIVES_REDIS_URL says
otherwise. ``TIFFIN_PEER_STRATEGY`` chooses the beat:

- ``celery-beat``: the default scheduler (a schedule file per server), started on every
  server, as the image that runs the app runs beat too;
- ``celery-redbeat``: celery-redbeat's scheduler (``beat -S redbeat.RedBeatScheduler``):
  the schedule in Redis, and only the beat holding its Redis lock sends; the lock's
  timeout is the lease every strategy with one gets (90 simulated seconds).

The schedule is what a team writes, ``crontab()`` (every minute), and Celery reads its
time through ``app.now()``, which here is the deployment's simulated clock, so beat's
minutes are the table's. Beat wakes at least every ``beat_max_loop_interval`` real
seconds to look at it (0.25 s: three simulated seconds at 10x). The worker is Celery's
default: prefork, early acknowledgement, Redis's visibility timeout of an hour.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from celery import Celery
from celery.schedules import crontab
from celery.signals import before_task_publish

from bench.peers.alternatives_probe import STRATEGY_VARIABLE, minute_of, probe_run
from tiffin import clock

LEASE_SECONDS = 90  # simulation.strategies.LEASE_SECONDS (its module needs Django's apps ready)

REDIS_URL = os.environ.get("TIFFIN_ALTERNATIVES_REDIS_URL", "redis://127.0.0.1:6379/10")
PROBE_TASK = "alternatives-probe"


class SimulatedCelery(Celery):  # type: ignore[misc]
    def now(self) -> datetime:
        return clock.now()


app = SimulatedCelery("tiffin_alternatives", broker=REDIS_URL)
app.conf.update(
    timezone="UTC",
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    beat_max_loop_interval=0.25,
    beat_schedule={"strategy-probe": {"task": PROBE_TASK, "schedule": crontab()}},
)
if os.environ.get(STRATEGY_VARIABLE) == "celery-redbeat":
    app.conf.update(
        beat_scheduler="redbeat.RedBeatScheduler",
        redbeat_redis_url=REDIS_URL,
        # Redis counts real seconds (and redbeat whole ones): the lease at the clock's speed.
        redbeat_lock_timeout=max(1, round(clock.real_seconds(LEASE_SECONDS))),
    )


@before_task_publish.connect
def _note_when_sent(body: Any = None, **kwargs: Any) -> None:
    """Beat's send time, on the simulated clock, in the message's kwargs (Celery's protocol 2
    body is ``(args, kwargs, embed)``): the tick the worker charges for."""
    if isinstance(body, tuple) and isinstance(body[1], dict):
        body[1].setdefault("sent_at", clock.now().isoformat())


@app.task(name=PROBE_TASK, bind=True)
def probe(self: Any, sent_at: str = "") -> None:
    sent = datetime.fromisoformat(sent_at) if sent_at else clock.now()
    probe_run(tick=minute_of(sent), delivery=str(self.request.id), leased=False)
