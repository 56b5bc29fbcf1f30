"""Fencing tokens for business writes.

A run gets a new token from a sequence every time it starts. A write that must not
happen twice calls ``fence_check(resource, token, run_id=...)`` inside its own
transaction first. The check refuses the write (``StaleFenceError``) when

1. the run is no longer running under that token (abandoned, superseded, dead or
   re-started): checked on the job_runs row, which stays share-locked until the write
   commits, so the abandon sweep cannot slip in between check and write; or
2. a higher token was already accepted for the resource (a newer run wrote it).

A worker that paused past its lease is therefore refused at the write, however long it
slept, even before the newer attempt has written anything.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from scheduling import metrics, sql


class StaleFenceError(Exception):
    """Raised when a write carries a fencing token older than one already accepted."""

    def __init__(self, resource: str, token: int, reason: str = "a newer run has written it") -> None:
        super().__init__(f"fence {token} is stale for {resource!r}: {reason}")
        self.resource = resource
        self.token = token


def fence_check(resource: str, token: int, *, now: datetime, run_id: int | None = None) -> None:
    """Accept ``token`` for ``resource`` or raise StaleFenceError (see the module doc).

    Must run inside the transaction of the write it protects (it holds the run's row and
    the resource's fence row until that transaction ends, so check and write are atomic).
    ``run_id`` names the run writing; without it only the token order is checked.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("fence_check must run inside the transaction of the write it protects")
    if run_id is not None and not sql.hold_run_if_current(run_id, token):
        metrics.fence_rejected_count(stage="write")
        raise StaleFenceError(resource, token, f"run {run_id} is no longer running under this fence")
    if not sql.fence_advance(resource, token, now):
        metrics.fence_rejected_count(stage="write")
        raise StaleFenceError(resource, token)
