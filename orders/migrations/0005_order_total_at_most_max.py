"""An order total is at most ORDER_TOTAL_MAX (100,000.00), so that no week of orders can
overflow the payout's money columns (orders/models.py, payouts/migrations/0009).

The check is added NOT VALID on PostgreSQL (tiffin.migration_operations): orders taken
before the limit are left as they were, and a payout that still cannot be written for one
of them is isolated to its restaurant (payouts.services); every new or changed row is
checked."""

from decimal import Decimal

import django.core.validators
from django.db import migrations, models

from tiffin.migration_operations import AddCheckConstraintNotValidOnPostgres


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0004_order_pending_by_id"),
    ]

    operations = [
        migrations.AlterField(
            model_name="order",
            name="total",
            field=models.DecimalField(
                decimal_places=2,
                max_digits=12,
                validators=[
                    django.core.validators.MinValueValidator(Decimal("0.01")),
                    django.core.validators.MaxValueValidator(Decimal("100000.00")),
                ],
            ),
        ),
        AddCheckConstraintNotValidOnPostgres(
            model_name="order",
            constraint=models.CheckConstraint(
                condition=models.Q(("total__lte", Decimal("100000.00"))), name="order_total_at_most_max"
            ),
        ),
    ]
