"""A payout pass's writer outside any run, for tests that call ``payouts_pay_due`` directly."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduling.fencing import fence_check


@dataclass(frozen=True)
class TokenOnly:
    """A ``payouts.services.PayoutRun`` with a fencing token and no run: ``fence_check``
    checks the token's order alone (no job_runs row to hold), and the rows it writes have
    no ``job_run``. A job's handler passes its ``RunContext`` instead."""

    fence: int
    now: datetime
    run_id: None = None

    def fence_check(self, resource: str) -> None:
        fence_check(resource, self.fence, now=self.now)
