"""Payout money columns from numeric(14, 2) to numeric(17, 2).

A payout counts at most 2,147,483,647 orders (``order_count`` is an integer) of at most
ORDER_TOTAL_MAX (100,000.00) each, so its gross is at most 214,748,364,700,000.00, which
needs 15 digits before the point. numeric(14, 2) stopped at 999,999,999,999.99: 101 orders
of 9,999,999,999.99 overflowed it and failed the whole batch (issue 30).

On PostgreSQL a wider precision with the same scale changes only the type modifier: no
row is rewritten and no value changes (the ALTER takes its lock for milliseconds), and the
partitions follow their parent."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("payouts", "0008_payout_partitioned_by_year"),
    ]

    operations = [
        migrations.AlterField(
            model_name="payout",
            name=name,
            field=models.DecimalField(decimal_places=2, max_digits=17),
        )
        for name in ("gross", "commission", "net")
    ]
