"""``manage.py simulate --strategy NAME`` and ``--compare``: parse, run
(``simulation.strategy_runner``), print the table, and exit 1 when the strategy (for a
comparison: the claim) did not run every tick exactly once."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from simulation.runner import SimulationPlan
from simulation.strategy_runner import comparison_table, results_ok, run_strategies, strategy_cases, strategy_plan


def strategy_command(
    base: SimulationPlan, options: dict[str, Any], *, stdout: OutputWrapper, prepare: Callable[[], None]
) -> None:
    """Check the options, then ``prepare`` the database (refuse, or reset), then run: bad
    input changes nothing."""
    if base.faults:
        raise CommandError(
            "--crash-worker, --pause-worker and --kill-scheduler do not apply here: use --strategy-faults"
        )
    try:
        cases = strategy_cases(options)
        plan = strategy_plan(
            servers=base.servers,
            workers=base.workers,
            start=base.start,
            duration=base.duration,
            speed=base.speed,
            environment=base.environment,
            skews=tuple(base.skews()) if base.skew else (),
            options=options,
        )
    except ValueError as error:
        raise CommandError(str(error)) from None
    prepare()
    log_dir = Path(options["log_dir"] or tempfile.mkdtemp(prefix="tiffin-strategies-"))
    say = (lambda line: print(line, file=sys.stderr)) if options["json"] else stdout.write
    results = run_strategies(plan, cases, log_dir=log_dir, say=say)
    if options["json"]:
        payload = {"faults": plan.fault_lines(), "results": [result.as_json() for result in results]}
        stdout.write(json.dumps(payload, indent=2, default=str))
    else:
        stdout.write("\n".join(comparison_table(plan, results)))
    compare = options["compare"] is not None
    if not results_ok(results, compare=compare):
        who = "the claim" if compare else cases[0].label
        raise CommandError(f"{who} did not run every tick exactly once (logs in {log_dir})", returncode=1)
