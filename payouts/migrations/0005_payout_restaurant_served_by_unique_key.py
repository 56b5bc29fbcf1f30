"""Drop the foreign key's own index on payouts_payout.restaurant_id: the unique index
payout_one_per_restaurant_week (restaurant_id, period_start) leads with the same column and
serves every lookup by restaurant, the PROTECT check included. The duplicate cost the
weekly run a write in a page of its own per restaurant (BENCHMARKS.md, benchmark 1).

Only the index is dropped: Django's own AlterField would drop and re-add the foreign-key
constraint, which re-validates it over the whole ledger under a lock."""

import django.db.models.deletion
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

_INDEX = "payouts_payout_restaurant_id_cee515c0"


def _drop(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    # CONCURRENTLY on PostgreSQL: a plain DROP INDEX takes an ACCESS EXCLUSIVE lock, which
    # would queue behind a running payout batch and block the admin and the ledger check.
    concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {_INDEX}")


def _create(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"CREATE INDEX{concurrently} {_INDEX} ON payouts_payout (restaurant_id)")


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("orders", "0003_order_placed_at_index"),
        ("payouts", "0004_ledger_guards"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="payout",
                    name="restaurant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="payouts",
                        to="orders.restaurant",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_drop, _create)],
        ),
    ]
