"""job_runs.overlap: the overlap policy a run follows instead of its job's (a backfill's
choice to run its ticks one after another). A column with a constant default: on
PostgreSQL 11+ adding it rewrites nothing, whatever the table's size."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0008_prune_history_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobrun",
            name="overlap",
            field=models.CharField(
                blank=True,
                choices=[
                    ("allow", "Allow"),
                    ("forbid", "Forbid (skip the new run)"),
                    ("queue", "Queue (start when the running one ends)"),
                    ("replace", "Replace (supersede the running one)"),
                ],
                db_default="",
                default="",
                max_length=16,
            ),
        ),
    ]
