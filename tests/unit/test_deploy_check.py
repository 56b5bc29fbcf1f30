"""`manage.py check --deploy` is clean with production-like settings, which hold only the
product (no simulation, no Redis), and a bad environment value stops the process at start."""

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
    "PAYMENT_PROVIDER_URL": "https://api.stripe.com",
}
SUITE_ONLY = {"DJANGO_SETTINGS_MODULE", "TIFFIN_DEVELOPMENT", "SCHEDULER_EXTRA_JOB_MODULES", "REDIS_URL"}


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "manage.py", *args], **env)


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    # Not the suite's settings module (tests.settings, which supplies a key and turns the
    # development tools on): the project's.
    clean = {k: v for k, v in os.environ.items() if k not in PRODUCTION and k not in SUITE_ONLY}
    return subprocess.run(argv, cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60)


def test_check_deploy_reports_no_problems_with_production_settings():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


WITHOUT_KEY = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}


def test_without_a_secret_key_the_process_refuses_to_start_unless_debug_is_on():
    unset = {k: v for k, v in WITHOUT_KEY.items() if k != "DEBUG"}  # DEBUG is off by default
    for env in (WITHOUT_KEY, unset):
        result = _manage("check", **env)
        assert result.returncode != 0
        assert result.stderr.startswith("configuration error: SECRET_KEY is not set and DEBUG is off")
        assert "Traceback" not in result.stderr
    # Local development: DEBUG=1 runs on the development key.
    assert _manage("check", **{**WITHOUT_KEY, "DEBUG": "1"}).returncode == 0


def test_the_development_key_given_explicitly_is_refused_with_debug_off():
    development_key = "django-insecure-tiffin-development-only-key-do-not-use-in-production"
    result = _manage("check", **{**PRODUCTION, "SECRET_KEY": development_key})
    assert result.returncode != 0
    assert "SECRET_KEY is the development key and DEBUG is off" in result.stderr


def test_a_malformed_boolean_stops_the_process_with_its_name():
    result = _manage("check", **{**PRODUCTION, "DEBUG": "maybe"})
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr


def test_a_malformed_number_stops_manage_py_and_gunicorn_with_one_line_and_exit_1():
    bad = {**PRODUCTION, "ORDER_ACCEPT_TIMEOUT_SECONDS": "abc"}
    message = "configuration error: ORDER_ACCEPT_TIMEOUT_SECONDS='abc' is not an integer"
    managed = _manage("check_runs", **bad)
    assert (managed.returncode, managed.stderr.strip()) == (1, message)
    gunicorn = [sys.executable, "-m", "gunicorn", "tiffin.wsgi", "--config", "deploy/gunicorn.conf.py"]
    web = _run(gunicorn, **bad, PORT="0")
    assert web.returncode == 1
    assert message in web.stderr.splitlines()
    assert "Traceback" not in web.stderr


# Loads the settings and every app's modules (each app's jobs.py, as a worker does), then
# prints what is installed and whether simulation or redis was imported on the way.
_INSTALLED = """
import sys, django
from django.apps import apps
from django.core.management import get_commands
django.setup()
import payouts.jobs, orders.jobs, carts.jobs, tiffin.urls
print(apps.is_installed("simulation"), "simulate" in get_commands())
print(sorted(name for name in ("simulation", "redis") if name in sys.modules))
"""


def test_production_settings_install_no_simulation_and_import_no_redis():
    production = _run([sys.executable, "-c", _INSTALLED], **PRODUCTION, DJANGO_SETTINGS_MODULE="tiffin.settings")
    assert production.returncode == 0, production.stderr
    assert production.stdout.splitlines() == ["False False", "[]"]
    assert "Unknown command: 'simulate'" in _manage("simulate", "--help", **PRODUCTION).stderr
    # Development settings (DEBUG=1, or TIFFIN_DEVELOPMENT=1 with DEBUG off) install it.
    for switch in ({"DEBUG": "1"}, {"TIFFIN_DEVELOPMENT": "1"}):
        environment = {**PRODUCTION, **switch, "DJANGO_SETTINGS_MODULE": "tiffin.settings"}
        development = _run([sys.executable, "-c", _INSTALLED], **environment)
        assert development.returncode == 0, development.stderr
        assert development.stdout.splitlines()[0] == "True True"


def test_extra_job_modules_without_the_development_tools_stop_the_process():
    result = _manage("check", **PRODUCTION, SCHEDULER_EXTRA_JOB_MODULES="simulation.probe_jobs")
    assert result.returncode == 1
    assert result.stderr.startswith("configuration error: SCHEDULER_EXTRA_JOB_MODULES is a development setting")
    assert "Traceback" not in result.stderr


def test_check_deploy_warns_when_no_payment_provider_is_configured():
    """Without PAYMENT_PROVIDER_URL every transfer waits and check_runs does not count it
    late (tiffin.W002 is where a server without a provider is told)."""
    without = {name: value for name, value in PRODUCTION.items() if name != "PAYMENT_PROVIDER_URL"}
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **without)
    assert result.returncode != 0
    assert "tiffin.W002" in result.stderr and "PAYMENT_PROVIDER_URL" in result.stderr
