"""The pending orders' partial index keyed by id instead of placed_at.

Keyed by placed_at, a statement about one order "if still placed" (accept, reject, the
delayed run's cancel) could be planned as a scan of that index filtered by id: the planner
takes it whenever its statistics say it is nearly empty, as they do when they were taken
while few orders were pending, and at a rush it then holds thousands. Keyed by id, every
plan that uses it is a probe.

The new index is built before the old one is dropped, both CONCURRENTLY on PostgreSQL
(tiffin.migration_operations): orders_order takes an insert per order.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres, RemoveIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orders", "0003_order_placed_at_index"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="order",
            index=models.Index(
                condition=models.Q(("status", "placed")),
                fields=["id"],
                name="order_pending_by_id",
            ),
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="order", name="order_placed_pending"),
    ]
