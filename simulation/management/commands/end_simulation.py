"""``manage.py end_simulation``: hand a database ``simulate`` ran on over to servers on
the real clock (``make up`` runs it before starting them; see
``simulation.services.simulation_hand_over``). Prints one line saying what it did, or
nothing when no simulation left anything to hand over."""

from __future__ import annotations

from typing import Any

from simulation.services import simulation_hand_over
from tiffin import clock
from tiffin.cli import TiffinCommand


class Command(TiffinCommand):
    help = (
        "After `simulate`: remove the probe jobs (their schedules and runs) and start every cron "
        "schedule afresh from now, so the time since the simulated history is not taken for an outage. "
        "Does nothing on a database no simulation ran on."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        hand_over = simulation_hand_over(now=clock.now())
        if hand_over is not None:
            self.stdout.write(hand_over.line())
