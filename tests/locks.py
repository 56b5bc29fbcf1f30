"""Helpers for tests that race two PostgreSQL connections."""

from __future__ import annotations

import time

from django.db import connection


def wait_until_blocked(waiting: int = 1, timeout: float = 10.0) -> None:
    """Wait until ``waiting`` other backends of this database wait on a lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            row = cursor.fetchone()
            if row is not None and row[0] >= waiting:
                return
        time.sleep(0.01)
    raise AssertionError("no backend started waiting for the lock")
