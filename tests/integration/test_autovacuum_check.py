"""The autovacuum check (scheduling.W002): on PostgreSQL it warns when the server or a
churning table has autovacuum off, runs with the database checks (``migrate``, ``check
--database``), and says nothing on SQLite."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.core import checks
from django.db import connection

from scheduling.checks import check_autovacuum


def w002(messages: Sequence[checks.CheckMessage]) -> list[checks.CheckMessage]:
    return [message for message in messages if message.id == "scheduling.W002"]


def server_autovacuum() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum')")
        return bool(cursor.fetchone()[0] == "on")


@pytest.mark.postgres
@pytest.mark.django_db
def test_it_names_the_server_setting_as_it_is():
    warnings = w002(check_autovacuum(databases=["default"]))
    if server_autovacuum():
        assert warnings == []
    else:  # this machine's own server may run with it off: then it is named
        [warning] = warnings
        assert "the server (autovacuum = off)" in warning.msg and warning.level == checks.WARNING


@pytest.mark.postgres
@pytest.mark.django_db
def test_it_names_a_churning_table_with_autovacuum_off():
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE job_runs SET (autovacuum_enabled = false)")  # undone with the test's transaction
    [warning] = w002(check_autovacuum(databases=["default"]))
    assert "table job_runs" in warning.msg and "table django_q_ormq" not in warning.msg
    assert "'default'" in warning.msg and "docs/operations.md" in (warning.hint or "")
    # Registered with the database checks: run_checks finds it only when given databases.
    assert w002(checks.run_checks(databases=["default"]))
    assert not w002(checks.run_checks())


@pytest.mark.django_db
def test_it_is_silent_on_sqlite_and_without_databases():
    assert check_autovacuum(databases=None) == []
    if connection.vendor == "sqlite":
        assert check_autovacuum(databases=["default"]) == []
