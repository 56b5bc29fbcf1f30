import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0007_restaurant_statement_email"),
    ]

    operations = [
        migrations.AddField(
            model_name="restaurant",
            name="provider_account",
            field=models.CharField(
                blank=True,
                default="",
                db_default="",
                help_text="Connected account at the payment provider (acct_...); transfers wait while it is blank.",
                max_length=255,
                validators=[
                    django.core.validators.RegexValidator(
                        "^acct_[A-Za-z0-9]+$", "A provider account is 'acct_' followed by letters and digits."
                    )
                ],
            ),
        ),
    ]
