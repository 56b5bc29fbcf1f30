"""The simulation's order traffic stops at an instant of the simulated clock, one answer
window and a margin before the end, however late its process got going: the last orders'
deadlines fall inside the simulated hours, so their cancellation runs are the simulated
servers' to run, never left for `make up` to settle on the real clock.

The command the runner builds is run here, in this process, on the clock the runner
gives it (accelerated 600x: about three real seconds), against the test database."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db.models import Max

from orders.models import CANCEL_STALE_ORDER_JOB, Order
from scheduling.models import JobRun
from simulation import runner
from simulation.runner import SETTLE_MARGIN, Simulation, SimulationPlan
from tiffin import clock

START = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
# Long enough for the window to end one answer window and the margin before the end
# (17 of 30 simulated minutes), at a speed that makes it about two real seconds.
PLAN = SimulationPlan(servers=1, workers=1, start=START, duration=timedelta(minutes=30), speed=600, orders_per_minute=5)


@pytest.fixture
def traffic_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """The traffic command the runner starts, recorded instead of started, with this
    process's clock set to the one the runner gives it (its boot lead shortened: nothing
    boots here). The clock and the signal handlers the command installs are put back."""
    monkeypatch.setattr(runner, "BOOT_SECONDS", 0.3)
    simulation = Simulation(PLAN, log_dir=tmp_path, say=lambda line: None)
    started: list[tuple[list[str], dict[str, str]]] = []

    def start(name: str, command: list[str], **kwargs: Any) -> None:
        started.append((command, kwargs["env"]))

    simulation.fleet.start = start  # type: ignore[method-assign,assignment]  # record the command, start nothing
    simulation._start_traffic()
    [(command, env)] = started
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    for name, value in env.items():
        if name.startswith("TIFFIN_CLOCK_"):
            monkeypatch.setenv(name, value)
    clock.reset()
    try:
        yield command
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        monkeypatch.undo()
        clock.reset()


@pytest.mark.django_db
@pytest.mark.timeout(60)  # a traffic that never stops fails here instead of hanging the suite
def test_the_traffic_places_no_order_after_the_instant_the_runner_gives_it(traffic_command, restaurant_factory):
    command = traffic_command
    for name in ("Dosa Darbar", "Chaat Corner", "Tandoor Tales"):
        restaurant_factory(name=name, onboarded_at=START - timedelta(days=7))
    assert command[0] == "simulate_orders" and "--minutes" not in command
    until = datetime.fromisoformat(command[command.index("--until") + 1])
    assert until == PLAN.end - SETTLE_MARGIN - timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)

    out = StringIO()
    call_command(*command, stdout=out)

    placed = Order.objects.aggregate(last=Max("placed_at"))["last"]
    assert placed is not None, out.getvalue()
    assert list(Order.objects.filter(placed_at__gte=until).values_list("placed_at", flat=True)) == []
    assert placed >= until - timedelta(minutes=3), f"the traffic stopped early, at {placed}"  # 15 orders expected
    assert f"order traffic: {Order.objects.count()} placed, " in out.getvalue()
    # Every order's cancellation run falls due inside the simulated hours, before the margin.
    deadlines = JobRun.objects.filter(job_name=CANCEL_STALE_ORDER_JOB).aggregate(last=Max("scheduled_for"))
    assert deadlines["last"] == placed + timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)
    assert deadlines["last"] < PLAN.end - SETTLE_MARGIN
    assert JobRun.objects.filter(job_name=CANCEL_STALE_ORDER_JOB).count() == Order.objects.count()
