from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0004_order_pending_by_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="restaurant",
            name="provider_account",
            field=models.CharField(
                blank=True,
                default="",
                help_text="Connected account at the payment provider (acct_...); transfers wait while it is blank.",
                max_length=255,
            ),
        ),
    ]
