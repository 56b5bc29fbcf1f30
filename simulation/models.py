"""What the simulation measures with: a probe job's charges.

A probe job charges once per tick, the side effect naive cron repeats on every server.
The table deliberately has no unique constraint: the number of charges per tick is
the measurement, so a duplicate shows up as a row instead of an IntegrityError.
"""

from __future__ import annotations

from django.db import models


class ProbeCharge(models.Model):
    job_name = models.CharField(max_length=100)
    scheduled_for = models.DateTimeField()
    run = models.ForeignKey("scheduling.JobRun", on_delete=models.CASCADE, related_name="+")
    fence = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    worker = models.CharField(max_length=200)
    charged_at = models.DateTimeField()

    class Meta:
        db_table = "simulation_probe_charges"
        ordering = ["scheduled_for", "id"]
        indexes = [
            # Duplicate count and the guarded charge: charges per (job_name, scheduled_for).
            models.Index(fields=["job_name", "scheduled_for"], name="probe_charge_tick"),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} charged for {self.scheduled_for.isoformat()}"


class StrategyRun(models.Model):
    """One execution of the strategy probe (``simulate --strategy``), whatever decided
    to run it: a server's cron line, a lock, or a claim. The charge is a column of the
    row, written when the work ends and deliberately unguarded (no unique key), so a
    second execution of a tick shows as a second charge.

    ``stale`` is measured at the charge, never acted on: the writer's lock or lease had
    already passed (the Redis key no longer held its token, its session no longer held
    the advisory lock). ``refused``: the claim's fence turned the write away.
    """

    strategy = models.CharField(max_length=40)
    scheduled_for = models.DateTimeField()
    server = models.CharField(max_length=200)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
    charged_at = models.DateTimeField(null=True)
    stale = models.BooleanField(default=False)
    refused = models.BooleanField(default=False)

    class Meta:
        db_table = "simulation_strategy_runs"
        ordering = ["scheduled_for", "id"]

    def __str__(self) -> str:
        return f"{self.strategy} on {self.server} for {self.scheduled_for.isoformat()}"
