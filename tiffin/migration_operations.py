"""Migration operations shared by the apps' migrations.

``AddIndexConcurrentlyOnPostgres`` builds an index with ``CREATE INDEX CONCURRENTLY`` on
PostgreSQL: job_runs and orders_order take an insert per order, and a plain CREATE INDEX
on a table of millions of rows blocks those inserts until it ends (minutes). A migration
using it sets ``atomic = False`` (CONCURRENTLY cannot run in a transaction); if the build
fails it leaves an INVALID index, which ``DROP INDEX`` and a new run of the migration fix.
"""

from typing import Any

from django.db import migrations


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    """AddIndex, built CONCURRENTLY on PostgreSQL, plainly elsewhere."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            concurrently = schema_editor.connection.vendor == "postgresql"
            schema_editor.add_index(model, self.index, **({"concurrently": True} if concurrently else {}))

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            concurrently = schema_editor.connection.vendor == "postgresql"
            schema_editor.remove_index(model, self.index, **({"concurrently": True} if concurrently else {}))
