"""Fencing tokens for business writes.

A run gets a new token from a sequence every time it starts. A write that must not
happen twice calls ``fence_check(resource, token)`` inside its own transaction first:
the check accepts a token at least as high as any accepted before for that resource and
raises ``StaleFenceError`` otherwise. A worker that paused past its lease (and whose
run was re-started elsewhere with a higher token) is therefore refused at the write,
however long it slept.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from scheduling import sql


class StaleFenceError(Exception):
    """Raised when a write carries a fencing token older than one already accepted."""

    def __init__(self, resource: str, token: int) -> None:
        super().__init__(f"fence {token} is stale for {resource!r}: a newer run has written it")
        self.resource = resource
        self.token = token


def fence_check(resource: str, token: int, *, now: datetime) -> None:
    """Accept ``token`` for ``resource`` or raise StaleFenceError.

    Must run inside the transaction of the write it protects (it holds the resource's
    fence row lock until that transaction ends, so the check and the write are atomic).
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("fence_check must run inside the transaction of the write it protects")
    if not sql.fence_advance(resource, token, now):
        raise StaleFenceError(resource, token)
