"""The index of the admin orders list: newest first by placed_at, and its date drill-down.

Built CONCURRENTLY on PostgreSQL (tiffin.migration_operations): orders_order takes an
insert per order, and a plain CREATE INDEX on millions of rows would block them.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orders", "0002_ledger_deactivation_and_rate_history"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="order",
            index=models.Index(fields=["placed_at", "id"], name="order_placed_at"),
        ),
    ]
