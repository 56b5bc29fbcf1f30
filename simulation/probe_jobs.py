"""The probe jobs ``manage.py simulate`` adds to the project's own jobs (through
SCHEDULER_EXTRA_JOB_MODULES; production never imports this module).

- ``sim-probe`` charges once a minute: the side effect naive cron would repeat on every
  server. Its charges per tick are the duplicate count of the report.
- ``sim-settlement`` runs for three minutes every ten, heartbeating: the run a crash or a
  pause lands in. It charges at the end, fenced and guarded like a real payment, so a
  worker that lost its run (crashed and re-run, or paused past its lease) cannot charge.

``TIFFIN_SIMULATE_BREAK=duplicate-charge`` (a test-only switch) makes ``sim-probe``
charge every tick twice, as two servers running the same cron line would, to prove that
the report catches it and ``simulate`` exits non-zero. ``TIFFIN_SIMULATE_BREAK=skip-fence``
makes ``sim-settlement`` skip its fence: it ignores the heartbeat that says the run was
taken from it and charges without checking its token (or the charge already made), as a
worker with a lock that lies would; a worker paused past its lease then charges a
second time once it wakes.

``TIFFIN_SIMULATE_SLOW_PROBE_MS`` (a test-only switch) makes every ``sim-probe`` run take
that many more real milliseconds: a slow worker, so an accelerated clock outruns the
workers on any machine and the governor has to slow it (tests/scenarios/test_governor.py).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from scheduling.context import RunContext, RunLostError
from scheduling.models import Overlap
from scheduling.registry import job
from simulation.services import PROBE_JOB, SETTLEMENT_JOB, probe_charge
from tiffin import clock

BREAK_VARIABLE = "TIFFIN_SIMULATE_BREAK"
SLOW_PROBE_VARIABLE = "TIFFIN_SIMULATE_SLOW_PROBE_MS"
SETTLEMENT_SECONDS = 180
HEARTBEAT_SECONDS = 15
# A settlement run whose heartbeat is this old is abandoned (its job's timeout).
SETTLEMENT_TIMEOUT_SECONDS = 20 * HEARTBEAT_SECONDS


@job(PROBE_JOB, cron="* * * * *", timeout_seconds=300)
def sim_probe(ctx: RunContext) -> dict[str, int]:
    if slow := float(os.environ.get(SLOW_PROBE_VARIABLE) or 0):
        time.sleep(slow / 1000)  # real time: a slow worker, not a long job
    if os.environ.get(BREAK_VARIABLE) == "duplicate-charge":
        charged = [probe_charge(ctx=ctx, now=clock.now(), guarded=False) for _ in range(2)]
    else:
        charged = [probe_charge(ctx=ctx, now=clock.now(), guarded=True)]
    return {"charges": sum(charged)}


@job(
    SETTLEMENT_JOB,
    cron="*/10 * * * *",
    overlap=Overlap.QUEUE,
    heartbeat=True,
    timeout_seconds=SETTLEMENT_TIMEOUT_SECONDS,
    backoff_seconds=30,
)
def sim_settlement(ctx: RunContext) -> dict[str, int]:
    fenced = os.environ.get(BREAK_VARIABLE) != "skip-fence"
    finish_at = clock.now() + timedelta(seconds=SETTLEMENT_SECONDS)
    while clock.now() < finish_at:
        try:
            ctx.heartbeat()  # raises RunLostError once the run was taken from this worker
        except RunLostError:
            if fenced:
                raise
        clock.sleep(HEARTBEAT_SECONDS)
    return {"charges": int(probe_charge(ctx=ctx, now=clock.now(), guarded=fenced, fenced=fenced))}
