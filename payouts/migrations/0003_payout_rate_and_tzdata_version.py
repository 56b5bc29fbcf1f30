from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("payouts", "0002_net_check_rounded_to_cents"),
        ("orders", "0002_ledger_deactivation_and_rate_history"),
    ]

    operations = [
        migrations.AddField(
            model_name="payout",
            name="commission_rate",
            field=models.DecimalField(
                decimal_places=4, default=0, help_text="The rate in force when the period began.", max_digits=5
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="payout",
            name="tzdata_version",
            field=models.CharField(
                default="unrecorded",
                help_text="The IANA tz database release the period's end was computed with.",
                max_length=16,
            ),
            preserve_default=False,
        ),
        # Payouts written before rates had a history were charged the restaurant's rate.
        migrations.RunSQL(
            "UPDATE payouts_payout SET commission_rate = "
            "(SELECT r.commission_rate FROM orders_restaurant r WHERE r.id = payouts_payout.restaurant_id)",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
