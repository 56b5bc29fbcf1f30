"""What the apps' hand-written SQL shares."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django.db import connection


def adapt(value: Any) -> Any:
    """A parameter for raw SQL, through the backend's own adapters, so a value written or
    compared here matches what the ORM stores (SQLite keeps naive UTC text, PostgreSQL
    timestamptz). Anything but a datetime or date passes through."""
    if isinstance(value, datetime):
        return connection.ops.adapt_datetimefield_value(value)
    if isinstance(value, date):
        return connection.ops.adapt_datefield_value(value)
    return value
