"""A claim row names its columns: it supplies every NOT NULL column of job_runs but the
primary key, and nothing job_runs does not have."""

from __future__ import annotations

from scheduling.models import JobRun
from scheduling.sql import CLAIM_COLUMNS


def test_a_claim_supplies_every_not_null_column_of_job_runs():
    columns = {field.column: field for field in JobRun._meta.concrete_fields}
    assert set(CLAIM_COLUMNS) <= set(columns)
    required = {name for name, field in columns.items() if not field.null and not field.primary_key}
    assert required <= set(CLAIM_COLUMNS)
