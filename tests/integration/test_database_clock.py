"""``tiffin.clock.DatabaseNow``: the database's clock, plain in production and on the
accelerated clock of ``simulate`` the same start, anchor and speed without the process's skew."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from tiffin import clock

START = datetime(2027, 3, 5, 18, 30, tzinfo=UTC)


def database_now(*, minus_seconds: float = 0.0) -> datetime:
    sql, params = clock.database_now_sql(connection.vendor, minus_seconds=minus_seconds)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        value = cursor.fetchone()[0]
    return value if isinstance(value, datetime) else datetime.fromisoformat(value).replace(tzinfo=UTC)


@pytest.fixture
def accelerated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """simulate's clock at 60x, started 10 real seconds ago, this process an hour fast."""
    monkeypatch.setenv("TIFFIN_CLOCK_START", START.isoformat())
    monkeypatch.setenv("TIFFIN_CLOCK_ANCHOR", repr(time.time() - 10))
    monkeypatch.setenv("TIFFIN_CLOCK_SPEED", "60")
    monkeypatch.setenv("TIFFIN_CLOCK_SKEW", "3600")
    clock.reset()
    yield
    clock.reset()


def server_clock() -> datetime:
    """The database's own clock, asked directly (SQLite's is the operating system's)."""
    sql = "SELECT statement_timestamp()" if connection.vendor == "postgresql" else "SELECT strftime('%s', 'now')"
    with connection.cursor() as cursor:
        cursor.execute(sql)
        value = cursor.fetchone()[0]
    return value if isinstance(value, datetime) else datetime.fromtimestamp(int(value), UTC)


@pytest.mark.django_db
def test_in_production_it_is_the_database_servers_clock():
    # Python's clock is moved 20 years back; the server's is not. The value follows the
    # server: a "database now" computed in this process would land in 2007.
    with time_machine.travel(datetime(2007, 1, 1, tzinfo=UTC), tick=False):
        assert datetime.now(UTC).year == 2007
        server, value, earlier = server_clock(), database_now(), database_now(minus_seconds=600)
    assert abs(value - server) < timedelta(seconds=5)
    assert abs(earlier - (server - timedelta(seconds=600))) < timedelta(seconds=5)


@pytest.mark.django_db
def test_on_the_accelerated_clock_it_runs_at_its_speed_without_the_process_skew(accelerated):
    expected = START + timedelta(seconds=600)  # 10 real seconds at 60x
    db_now, process_now = database_now(), clock.now()
    assert abs(db_now - expected) < timedelta(seconds=30)
    assert abs((process_now - db_now) - timedelta(seconds=3600)) < timedelta(seconds=30)
    assert abs((db_now - database_now(minus_seconds=90)) - timedelta(seconds=90)) < timedelta(seconds=30)


@pytest.mark.parametrize("variable", ["TIFFIN_CLOCK_SPEED", "TIFFIN_CLOCK_SKEW", "TIFFIN_CLOCK_ANCHOR"])
@pytest.mark.parametrize("raw", ["nan", "inf", "fast"])
def test_a_clock_variable_that_is_not_a_finite_number_is_refused_by_name(accelerated, monkeypatch, variable, raw):
    monkeypatch.setenv(variable, raw)
    clock.reset()
    with pytest.raises(ImproperlyConfigured, match=variable):
        clock.now()


@pytest.mark.django_db
def test_a_clock_file_slows_the_process_and_the_database_clock_alike(accelerated, monkeypatch, tmp_path):
    # simulate's governor: from 5 real seconds ago the clock ran at 6x, and from a real
    # second hence it will run at 3x (announced ahead, so every process has read it).
    path = tmp_path / "clock.json"
    monkeypatch.setenv("TIFFIN_CLOCK_FILE", str(path))
    slowed_real = time.time() - 5
    slowed_at = START + timedelta(seconds=(slowed_real - (time.time() - 10)) * 60)  # 5 real s at 60x
    later = time.time() + 1
    segments = (
        clock.ClockSegment(slowed_at, slowed_real, 6.0),
        clock.ClockSegment(slowed_at + timedelta(seconds=(later - slowed_real) * 6), later, 3.0),
    )
    clock.write_segments(str(path), segments)
    expected = slowed_at + timedelta(seconds=5 * 6)  # 300 s at 60x, then 5 real s at 6x
    db_now, process_now = database_now(), clock.now()
    assert abs(db_now - expected) < timedelta(seconds=3)
    assert abs((process_now - db_now) - timedelta(seconds=3600)) < timedelta(seconds=3)
    assert clock.real_seconds(60) == pytest.approx(10)
    # The announced segment is in the statement already, and takes over at its anchor.
    sql, _ = clock.database_now_sql(connection.vendor)
    assert "CASE WHEN" in sql
    time.sleep(max(0.0, later - time.time()) + 0.5)
    assert clock.real_seconds(60) == pytest.approx(20)
    assert abs(database_now() - segments[1].at(time.time())) < timedelta(seconds=2)
