"""Test-only jobs for the failure scenarios, one module per scenario group.

The processes a scenario starts import them through SCHEDULER_EXTRA_JOB_MODULES, so
production never declares them. Each handler charges through
``simulation.services.probe_charge``: the charge is the side effect naive cron would
repeat, and the scenarios count charges per tick.
"""
