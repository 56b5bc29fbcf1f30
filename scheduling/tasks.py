"""django-q2 task entry points: load ids, call the service."""

from __future__ import annotations

from scheduling.execution import runs_execute, worker_name


def execute_runs(run_ids: list[int]) -> int:
    """Start and execute the given runs of one job; returns how many this delivery ran."""
    return len(runs_execute(run_ids=run_ids, worker=worker_name()))
