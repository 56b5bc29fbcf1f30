"""The simulation's order traffic stops at an instant of the simulated clock, one answer
window and a margin before the end, however late its process got going: the last orders'
deadlines fall inside the simulated hours, so their cancellation runs are the simulated
servers' to run, never left for `make up` to settle on the real clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings

from simulation.runner import SETTLE_MARGIN, Simulation, SimulationPlan

START = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)


def test_the_traffic_is_told_the_instant_to_stop_not_a_number_of_minutes(tmp_path: Path) -> None:
    plan = SimulationPlan(
        servers=3, workers=2, start=START, duration=timedelta(hours=2), speed=120, orders_per_minute=6
    )
    simulation = Simulation(plan, log_dir=tmp_path, say=lambda line: None)
    started: list[list[str]] = []

    def start(name: str, command: list[str], **kwargs: Any) -> None:
        started.append(command)

    simulation.fleet.start = start  # type: ignore[method-assign,assignment]  # record the command, start nothing
    simulation._start_traffic()
    [command] = started
    assert command[0] == "simulate_orders" and "--minutes" not in command
    until = datetime.fromisoformat(command[command.index("--until") + 1])
    last_deadline = until + timedelta(seconds=settings.ORDER_ACCEPT_TIMEOUT_SECONDS)
    assert last_deadline == plan.end - SETTLE_MARGIN
