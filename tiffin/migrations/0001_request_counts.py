# The table of tiffin.ratelimit: request counts per client and minute, shared by every process.

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="RequestCount",
            fields=[
                ("bucket", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("window_start", models.DateTimeField()),
                ("count", models.PositiveIntegerField()),
            ],
            options={
                "db_table": "request_counts",
                "indexes": [models.Index(fields=["window_start"], name="request_counts_window")],
            },
        ),
    ]
