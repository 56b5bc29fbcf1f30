"""procrastinate's periodic probe for the alternatives table, found by its Django
autodiscovery (bench/peers/alternatives_settings.py names this module instead of
``tasks``, so the cancellation benchmark's workers never see it).

``* * * * * */N``: every N real seconds (croniter's sixth field), N being the simulated
minute at the deployment's speed (``TIFFIN_PEER_TICK_SECONDS``), so each real tick is one
simulated minute. procrastinate passes the tick's ``timestamp``; every worker's deferrer
defers each tick, and its unique row in ``procrastinate_periodic_defers`` lets one through.
"""

from __future__ import annotations

import os

from procrastinate import JobContext
from procrastinate.contrib.django import app

from bench.peers.alternatives_probe import nearest_minute, probe_run, simulated_at

TICK_SECONDS = int(os.environ.get("TIFFIN_PEER_TICK_SECONDS", "6"))


@app.periodic(cron=f"* * * * * */{TICK_SECONDS}")
@app.task(name="alternatives-probe", pass_context=True)
def procrastinate_probe(context: JobContext, timestamp: int) -> None:
    job_id = context.job.id if context.job else "?"
    probe_run(tick=nearest_minute(simulated_at(timestamp)), delivery=f"job:{job_id}", leased=False)
