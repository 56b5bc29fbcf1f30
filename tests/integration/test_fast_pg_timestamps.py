"""The compiled timestamp loader put back on PostgreSQL connections (tiffin.fast_pg_timestamps)
reads every value as Django's own loader does, and steps aside when the session's zone
is not UTC."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import register_tzloader  # type: ignore[import-untyped]
from psycopg.postgres import types
from psycopg.pq import Format

from scheduling.models import JobRun

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

TIMESTAMPTZ = types["timestamptz"].oid

# Edges of the text format: DST changes in the zones the project serves, a leap day,
# microseconds with trailing zeros, negative offsets written as UTC, the ends of the range.
VALUES = [
    "2026-03-08 10:00:00+00",
    "2026-03-29 01:00:00.000001+00",
    "2026-10-25 00:59:59.999999+00",
    "2028-02-29 23:30:00.12+00",
    "2026-11-01 06:30:00-05",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
]
SELECT = "SELECT v::timestamptz FROM unnest(%s::text[]) WITH ORDINALITY AS t(v, n) ORDER BY n"


def read(*, django_loader: bool, values: list[str] = VALUES) -> list[datetime]:
    with connection.cursor() as cursor:
        if django_loader:
            register_tzloader(connection.timezone, cursor.cursor)  # Django's, on this cursor only
        cursor.execute(SELECT, [values])
        return [row[0] for row in cursor.fetchall()]


def loader_instance():
    with connection.cursor() as cursor:
        loader = cursor.cursor.adapters.get_loader(TIMESTAMPTZ, Format.TEXT)
        return loader(TIMESTAMPTZ, cursor.cursor)


def compiled(instance) -> bool:
    """Whether the instance parses with psycopg's compiled loader, not with its own
    (Django's) Python method."""
    return type(instance.load.__self__).__module__ == "psycopg_binary._psycopg"


def test_the_connection_reads_timestamps_with_the_compiled_loader():
    instance = loader_instance()
    assert type(instance).__name__ == "UtcTimestamptzLoader" and instance.timezone is UTC
    assert compiled(instance)
    # Django's own loader, for contrast, parses in Python.
    with connection.cursor() as cursor:
        register_tzloader(connection.timezone, cursor.cursor)
        django = cursor.cursor.adapters.get_loader(TIMESTAMPTZ, Format.TEXT)(TIMESTAMPTZ, cursor.cursor)
    assert not compiled(django)


def test_every_value_is_the_one_djangos_loader_reads():
    fast, django = read(django_loader=False), read(django_loader=True)
    assert fast == django and [value.tzinfo for value in fast] == [UTC] * len(VALUES)
    assert fast[4] == datetime(2026, 11, 1, 11, 30, tzinfo=UTC)


def test_a_session_in_another_zone_falls_back_to_djangos_reading():
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
    try:
        assert not compiled(loader_instance())
        # (Not the year 9999: in that zone it is the year 10000, which neither can read.)
        assert read(django_loader=False, values=VALUES[:-1]) == read(django_loader=True, values=VALUES[:-1])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")


def test_models_read_back_what_they_stored():
    when = datetime(2026, 3, 29, 1, 0, 0, 1, tzinfo=UTC)
    run = JobRun.objects.create(
        job_name="probe", scheduled_for=when, due_at=when, created_at=when, status="enqueued", trigger="delayed",
        enqueued_at=when,
    )  # fmt: skip
    stored = JobRun.objects.get(pk=run.pk)
    assert (stored.scheduled_for, stored.due_at) == (when, when) and stored.scheduled_for.tzinfo is UTC
