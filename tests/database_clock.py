"""The database's clock, set for one step of a test that walks an order through a past
timeline (``order_accept`` judges the deadline by the database's clock, which
``time_machine`` cannot move)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from django.db import connection

from tiffin import clock

_VARIABLES = ("TIFFIN_CLOCK_START", "TIFFIN_CLOCK_ANCHOR", "TIFFIN_CLOCK_SPEED", "TIFFIN_CLOCK_SKEW")
_EPOCH = {
    "postgresql": "SELECT extract(epoch FROM statement_timestamp())::float8",
    "sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
}


@contextmanager
def database_clock_at(at: datetime) -> Iterator[None]:
    """Inside the block the database's clock (``tiffin.clock.DatabaseNow``) reads ``at``,
    running at real speed; the environment is put back as it was after it. The anchor is
    the database's own reading, so a frozen ``time_machine`` clock does not shift it."""
    with connection.cursor() as cursor:
        cursor.execute(_EPOCH[connection.vendor])
        (anchor,) = cursor.fetchone()
    saved = {name: os.environ.get(name) for name in _VARIABLES}
    os.environ.update(
        TIFFIN_CLOCK_START=at.isoformat(),
        TIFFIN_CLOCK_ANCHOR=repr(anchor),
        TIFFIN_CLOCK_SPEED="1",
        TIFFIN_CLOCK_SKEW="0",
    )
    clock.reset()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        clock.reset()
