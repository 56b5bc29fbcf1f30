"""A run's events in the order they were written (id), not by the writers' clocks
(``at``), which differ between servers. Options only: nothing changes in the database.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0010_metrics_index"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="jobrunevent",
            options={"ordering": ["id"]},
        ),
    ]
