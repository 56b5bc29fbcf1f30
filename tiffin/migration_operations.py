"""Migration operations shared by the apps' migrations.

``AddIndexConcurrentlyOnPostgres`` builds an index with ``CREATE INDEX CONCURRENTLY`` on
PostgreSQL: job_runs and orders_order take an insert per order, and a plain CREATE INDEX
on a table of millions of rows blocks those inserts until it ends (minutes). A migration
using it sets ``atomic = False`` (CONCURRENTLY cannot run in a transaction); if the build
fails it leaves an INVALID index, which ``DROP INDEX`` and a new run of the migration fix.
``RemoveIndexConcurrentlyOnPostgres`` is its counterpart for ``DROP INDEX``.

``AddCheckConstraintNotValidOnPostgres`` adds a check without reading the rows already
there. Its brief ACCESS EXCLUSIVE lock waits at most ``ADD_LOCK_TIMEOUT`` behind a long
transaction (every query on the table would queue behind the waiting ALTER), then fails
the migration, to be run again; a constraint already there (an earlier run whose later
step failed) is left as it is. ``ValidateConstraintOnPostgres``, in a later step of a
non-atomic migration (so the ADD's lock is released first), then reads the rows under a
SHARE UPDATE EXCLUSIVE lock, which lets reads and writes go on while it scans.

``on_postgresql`` runs SQL (the ledger's triggers) on PostgreSQL only, as a RunPython
function: SQLite has no PL/pgSQL, and its single writer and the services' checks stand in.
"""

from collections.abc import Callable
from typing import Any

from django.apps.registry import Apps
from django.db import migrations, transaction
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

# How long adding a NOT VALID check waits for its table's lock before the migration fails.
ADD_LOCK_TIMEOUT = "5s"


def on_postgresql(sql: str) -> Callable[[Apps, BaseDatabaseSchemaEditor], None]:
    """A RunPython function that runs ``sql`` on PostgreSQL and does nothing elsewhere."""

    def run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        if _on_postgresql(schema_editor):
            # No parameters: the SQL's % signs are PL/pgSQL's, not placeholders.
            with schema_editor.connection.cursor() as cursor:
                cursor.execute(sql)

    return run


def _on_postgresql(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    # seam: the migrating connection's backend; each operation here differs on PostgreSQL only.
    return schema_editor.connection.vendor == "postgresql"


def _concurrently(schema_editor: Any) -> dict[str, bool]:
    return {"concurrently": True} if _on_postgresql(schema_editor) else {}


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    """AddIndex, built CONCURRENTLY on PostgreSQL, plainly elsewhere."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, **_concurrently(schema_editor))

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, **_concurrently(schema_editor))


class RemoveIndexConcurrentlyOnPostgres(migrations.RemoveIndex):
    """RemoveIndex, dropped CONCURRENTLY on PostgreSQL (a plain DROP INDEX waits for, then
    blocks, every statement on the table), plainly elsewhere."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = from_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.remove_index(model, index, **_concurrently(schema_editor))

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.add_index(model, index, **_concurrently(schema_editor))


class AddCheckConstraintNotValidOnPostgres(migrations.AddConstraint):
    """AddConstraint of a CheckConstraint, added ``NOT VALID`` on PostgreSQL: every row
    written from now on is checked, the rows already there are not (they are history the
    ledger was computed from, and checking them would scan the table under a lock).
    Elsewhere (SQLite, a development database) it is a plain AddConstraint."""

    # Set by AddConstraint.__init__; django-stubs does not declare them.
    model_name: str
    constraint: Any

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if not _on_postgresql(schema_editor):
            schema_editor.add_constraint(model, self.constraint)
            return
        connection = schema_editor.connection
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM pg_constraint WHERE conname = %s AND conrelid = %s::regclass",
                [self.constraint.name, model._meta.db_table],
            )
            if cursor.fetchone():
                return  # added by an earlier run of this migration, whose later step failed
            # Waiting for the lock queues every query on the table behind the ALTER: give
            # up instead, and the migration is run again when the long transaction is gone.
            cursor.execute(f"SET LOCAL lock_timeout = '{ADD_LOCK_TIMEOUT}'")
            schema_editor.execute(f"{self.constraint.create_sql(model, schema_editor)} NOT VALID")


class ValidateConstraintOnPostgres(migrations.operations.base.Operation):
    """``ALTER TABLE ... VALIDATE CONSTRAINT`` on PostgreSQL: the rows already there are
    checked, without blocking writers, and the constraint then counts as proven (the
    planner may use it). Nothing elsewhere: SQLite's AddConstraint checked them when it
    rebuilt the table. Changes no state; undone by nothing (an unvalidated constraint
    still checks every new row)."""

    reversible = True

    def __init__(self, model_name: str, name: str) -> None:
        self.model_name = model_name
        self.name = name

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model) and _on_postgresql(schema_editor):
            quote = schema_editor.quote_name
            schema_editor.execute(f"ALTER TABLE {quote(model._meta.db_table)} VALIDATE CONSTRAINT {quote(self.name)}")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        pass

    def describe(self) -> str:
        return f"Validate constraint {self.name} on {self.model_name} (PostgreSQL)"
