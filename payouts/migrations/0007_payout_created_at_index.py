"""The index of the hourly ledger check: the payouts written since the check's window
began (``payouts.selectors.ledger_problems(written_since=...)``). Without it the check
read the whole ledger twice each hour: a sequential scan of 1,040,000 payouts took
180 ms, growing with every week paid. Payouts are written once a week in id (and so
created_at) order, so the index grows at its right edge.

Built CONCURRENTLY on PostgreSQL (tiffin.migration_operations), as any index on a table
that may already hold years of rows.
"""

from django.db import migrations, models

from tiffin.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("payouts", "0006_order_guard_fires_only_for_delivered"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="payout",
            index=models.Index(fields=["created_at"], name="payout_created_at"),
        ),
    ]
