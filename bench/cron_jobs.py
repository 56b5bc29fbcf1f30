"""The generated cron jobs of the scheduler-pass benchmark (bench/scheduler_pass.py).

Its processes import this module through ``SCHEDULER_EXTRA_JOB_MODULES=bench.cron_jobs``
with ``BENCH_CRON_JOBS=<n>``: n jobs ``bench-cron-<i>``, each every minute, with the
defaults of a declared job. Nothing else declares them.
"""

from __future__ import annotations

import os

from bench.scheduler_pass import CRON_JOB_PREFIX
from scheduling.context import RunContext
from scheduling.registry import job


def bench_cron(ctx: RunContext) -> dict[str, str]:
    # Nothing to do: the benchmark measures the pass that claims and enqueues the runs.
    return {"scheduled_for": ctx.scheduled_for.isoformat()}


for _i in range(int(os.environ.get("BENCH_CRON_JOBS", "0"))):
    job(f"{CRON_JOB_PREFIX}{_i}", cron="* * * * *")(bench_cron)
