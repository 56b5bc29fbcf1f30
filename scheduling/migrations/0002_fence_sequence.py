"""Fencing tokens come from a PostgreSQL sequence (no row lock, never reused); SQLite,
which has no sequences, uses a one-row counter table under its single writer."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def create_fence_source(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("CREATE SEQUENCE IF NOT EXISTS job_runs_fence_seq")
    else:
        apps.get_model("scheduling", "FenceCounter").objects.get_or_create(id=1, defaults={"value": 0})


def drop_fence_source(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP SEQUENCE IF EXISTS job_runs_fence_seq")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_initial")]
    operations = [migrations.RunPython(create_fence_source, drop_fence_source)]
