"""What a handler receives: the run's identity and logical time, and a heartbeat."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduling.fencing import fence_check
from scheduling.models import JobRun, RunStatus
from tiffin import clock


class RunLostError(Exception):
    """The run is no longer this worker's (abandoned, superseded or re-run elsewhere)."""


@dataclass(frozen=True)
class RunContext:
    run_id: int
    job_name: str
    subject: str
    # The logical time: every business computation uses it instead of now().
    scheduled_for: datetime
    fence: int
    attempt: int
    trigger: str
    # What the caller executing the run here wants after each batch (catch_up_payouts'
    # progress display); None when a worker runs it. See ``batch_done``.
    on_batch: Callable[[Any], None] | None = field(default=None, compare=False, repr=False)

    def fence_check(self, resource: str) -> None:
        """``scheduling.fencing.fence_check`` for this run: call it inside the transaction
        of a write that must not happen twice."""
        fence_check(resource, self.fence, now=clock.now(), run_id=self.run_id)

    def heartbeat(self) -> None:
        """Prove this run is alive; raise RunLostError if it is no longer ours.

        Long handlers call it between batches. The update is conditional on the fence,
        so a worker that was paused past its lease learns at once that it lost the run.
        """
        changed = JobRun.objects.filter(id=self.run_id, fence=self.fence, status=RunStatus.RUNNING).update(
            heartbeat_at=clock.now()
        )
        if changed != 1:
            raise RunLostError(f"run {self.run_id} (fence {self.fence}) is no longer running on this worker")

    def batch_done(self, progress: Any) -> None:
        """Pass it as a long handler's ``on_batch``: after each batch, heartbeat (raising
        RunLostError if the run is no longer ours), then hand the progress to the caller."""
        self.heartbeat()
        if self.on_batch is not None:
            self.on_batch(progress)
