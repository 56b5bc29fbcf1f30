"""`manage.py check --deploy` is clean with production-like settings, and a bad
environment value stops the process at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": "k3v9-this-is-a-long-random-production-secret-4f8a2c1e9b7d6a5f3e2d1c0b",
    "ALLOWED_HOSTS": "tiffin.example.com",
    "DATABASE_URL": "sqlite:///db/deploy-check.sqlite3",
}


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in PRODUCTION}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


def test_check_deploy_reports_no_problems_with_production_settings():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_flags_the_development_secret_key():
    without_key = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **without_key)
    assert result.returncode != 0
    assert "security.W009" in result.stderr + result.stdout


def test_a_malformed_boolean_stops_the_process_with_its_name():
    result = _manage("check", **{**PRODUCTION, "DEBUG": "maybe"})
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr
