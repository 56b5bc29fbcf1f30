"""Fencing tokens carry the primary's timeline above a 40-bit counter (scheduling.sql.NEXT_FENCE),
so the counter, job_runs_fence_seq, must never pass 2**40 - 1: at its MAXVALUE nextval raises
instead of carrying into the epoch (docs/failover.md). Tokens already stored are below 2**40,
so below every new one. SQLite has no standby and keeps its plain counter."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

FENCE_COUNTER_MAX = 2**40 - 1


def limit_fence_counter(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER SEQUENCE job_runs_fence_seq MAXVALUE {FENCE_COUNTER_MAX} NO CYCLE")


def unlimit_fence_counter(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER SEQUENCE job_runs_fence_seq NO MAXVALUE")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0011_jobrunevent_written_order")]
    operations = [migrations.RunPython(limit_fence_counter, unlimit_fence_counter)]
