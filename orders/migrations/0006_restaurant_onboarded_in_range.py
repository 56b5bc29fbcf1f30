"""Onboarding instants within [2000-01-01, 2100-01-01) UTC (``orders.models.ONBOARDED_FROM``
and ``ONBOARDED_BEFORE``), for every path that writes a restaurant.

On PostgreSQL the check is added NOT VALID: every new or updated row is checked, and the
rows already there are not read. A restaurant onboarded earlier (1975, typed into the
admin before this check) may already have payouts; its onboarding can then no longer
move, and a payout pass pays its whole ledger anyway (``payouts.weeks.weeks_finished``
lists every finished week). SQLite (development) rebuilds the table with the check.
"""

import datetime
from typing import Any

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import orders.models

_CONSTRAINT = models.CheckConstraint(
    condition=models.Q(onboarded_at__gte=datetime.datetime(2000, 1, 1, 0, 0, tzinfo=datetime.UTC))
    & models.Q(onboarded_at__lt=datetime.datetime(2100, 1, 1, 0, 0, tzinfo=datetime.UTC)),
    name="restaurant_onboarded_in_range",
)
_ADD_NOT_VALID = (
    "ALTER TABLE orders_restaurant ADD CONSTRAINT restaurant_onboarded_in_range "
    "CHECK (onboarded_at >= '2000-01-01 00:00+00' AND onboarded_at < '2100-01-01 00:00+00') NOT VALID"
)


class AddConstraintNotValidOnPostgres(migrations.AddConstraint):
    """AddConstraint, added NOT VALID on PostgreSQL (existing rows are not checked)."""

    def database_forwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(_ADD_NOT_VALID)
            return
        super().database_forwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0005_order_total_at_most_max"),
    ]

    operations = [
        migrations.AlterField(
            model_name="restaurant",
            name="onboarded_at",
            field=models.DateTimeField(validators=[orders.models.validate_onboarded_at]),
        ),
        AddConstraintNotValidOnPostgres(model_name="restaurant", constraint=_CONSTRAINT),
    ]
