"""The NOT VALID check's migration step on PostgreSQL, as a live table meets it: it gives up
on a table a long transaction holds instead of queueing every query behind its lock, and a
second run (after a later step of its migration failed) leaves the constraint as it is."""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connection, models, transaction
from django.db.migrations.loader import MigrationLoader

from tests.locks import in_own_connection
from tiffin import migration_operations
from tiffin.migration_operations import AddCheckConstraintNotValidOnPostgres

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _add(name: str, condition: models.Q) -> None:
    operation = AddCheckConstraintNotValidOnPostgres(
        model_name="jobrun", constraint=models.CheckConstraint(condition=condition, name=name)
    )
    state = MigrationLoader(connection).project_state()
    with connection.schema_editor(atomic=False) as editor:
        operation.database_forwards("scheduling", editor, state, state)


def _constraints() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'job_runs'::regclass")
        return {name for (name,) in cursor.fetchall()}


def test_a_second_run_leaves_the_constraint_already_there() -> None:
    assert "job_run_enqueued_has_enqueued_at" in _constraints()
    _add("job_run_enqueued_has_enqueued_at", ~models.Q(status="enqueued") | models.Q(enqueued_at__isnull=False))
    assert "job_run_enqueued_has_enqueued_at" in _constraints()


def test_it_gives_up_on_a_table_a_long_transaction_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migration_operations, "ADD_LOCK_TIMEOUT", "200ms")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("LOCK TABLE job_runs IN ACCESS SHARE MODE")  # as a long report's read does
            holding.set()
            release.wait(timeout=60)

    holder = threading.Thread(target=in_own_connection(hold))
    holder.start()
    try:
        assert holding.wait(timeout=30)
        with pytest.raises(OperationalError, match="lock timeout"):
            _add("job_run_probe_check", models.Q(attempts__gte=0))
    finally:
        release.set()
        holder.join()
    assert "job_run_probe_check" not in _constraints()
    try:
        _add("job_run_probe_check", models.Q(attempts__gte=0))  # once the transaction is gone, it goes through
        assert "job_run_probe_check" in _constraints()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE job_runs DROP CONSTRAINT IF EXISTS job_run_probe_check")
