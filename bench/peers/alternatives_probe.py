"""The strategy probe as the real tools run it (bench/peers/alternatives.py): the same
work and the same unguarded charge as ``simulation.strategies``, recorded in the same
``simulation_strategy_runs`` rows, so the table counts them with the same code.

Each tool's process runs on the real clock (its own scheduling decisions are its own),
with the deployment's simulated clock in its environment: the tool's tick, a real
instant, is converted to the simulated minute it stands for, and ``clock.now()`` (the
rows' instants, the long run's length) reads simulated time as in the other rows.

``server`` on a row is ``server-N <delivery>``: the delivery is what the tool would hand
to a second worker if its lease ran out (a Celery task id, a procrastinate job id, the
tick of a django-q2 schedule). ``stale`` is measured at the charge, never acted on: for a
tool with a lease on the execution (django-q2's ``retry``), another execution of the same
delivery started after this one, so the write comes after the lease passed to another.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from tiffin import clock

SERVER_VARIABLE = "TIFFIN_PEER_SERVER"
STRATEGY_VARIABLE = "TIFFIN_PEER_STRATEGY"


def tick_seconds(speed: float) -> int:
    """Real seconds of a simulated minute: a whole divisor of 60, so cron can say it."""
    seconds = 60 / speed
    if seconds != int(seconds) or 60 % int(seconds):
        raise ValueError(f"--speed {speed:g}: a simulated minute must be a whole divisor of 60 real seconds")
    return int(seconds)


def simulated_at(real: float) -> datetime:
    """The simulated instant the deployment's clock shows at real UNIX time ``real``."""
    start = datetime.fromisoformat(os.environ["TIFFIN_CLOCK_START"])
    anchor = float(os.environ["TIFFIN_CLOCK_ANCHOR"])
    speed = float(os.environ["TIFFIN_CLOCK_SPEED"])
    return start + timedelta(seconds=(real - anchor) * speed)


def minute_of(instant: datetime) -> datetime:
    """The probe's tick (once a minute) that ``instant`` falls in."""
    return instant.astimezone(UTC).replace(second=0, microsecond=0)


def nearest_minute(instant: datetime) -> datetime:
    """The probe's tick a tool's own tick stands for (the conversion rounds off floats)."""
    return minute_of(instant + timedelta(seconds=30))


def probe_run(*, tick: datetime, delivery: str, leased: bool) -> None:
    """One execution of ``tick`` by this process's tool: record the start, work, charge."""
    # Imported here: Celery imports this module before Django's apps are ready.
    from simulation.models import StrategyRun
    from simulation.strategies import probe_work

    strategy = os.environ[STRATEGY_VARIABLE]
    server = f"{os.environ[SERVER_VARIABLE]} {delivery}"
    row = StrategyRun.objects.create(strategy=strategy, scheduled_for=tick, server=server, started_at=clock.now())
    probe_work(tick=tick, heartbeat=lambda: None)
    superseded = StrategyRun.objects.filter(
        strategy=strategy, server__endswith=f" {delivery}", started_at__gt=row.started_at
    ).exclude(id=row.id)
    now = clock.now()
    StrategyRun.objects.filter(id=row.id).update(charged_at=now, finished_at=now, stale=leased and superseded.exists())


def djangoq_probe(scheduled_for: str) -> None:
    """The django-q2 Schedule's function: ``scheduled_for`` is the schedule's ``next_run``
    when the scheduler took it (its ``intended_date_kwarg``), a real instant."""
    tick = nearest_minute(simulated_at(datetime.fromisoformat(scheduled_for).timestamp()))
    probe_run(tick=tick, delivery=f"q:{tick.isoformat()}", leased=True)
