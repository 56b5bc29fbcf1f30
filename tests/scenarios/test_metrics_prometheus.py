"""A real Prometheus scraping a live server: what it answers matches job_runs.

A web server (``manage.py runserver``) and two worker processes (each a django-q2
cluster of two forked workers plus a scheduler loop) share one metrics directory and an
accelerated clock; two test jobs tick every simulated minute, one always succeeding and
one always dying. A Prometheus server on a free port scrapes the web server every second
with the bearer token (each worker also answers /metrics on a port of its own, checked
directly: the workers share the web server's directory here, so Prometheus scrapes one
of them, as a deployment must). Once the workers have stopped, the values Prometheus answers
through its HTTP API must equal what job_runs holds: the counters summed over four
worker processes and two schedulers, the last success, the lateness histogram's count.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from support.ports import free_port
from support.processes import SimulatedTime, wait_for
from tests import prometheus
from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

TOKEN = "scenario-metrics-token"
JOBS = ("metered-ok", "metered-dies")
# Finished runs of each test job to wait for before stopping the workers.
RUNS_PER_JOB = 4


def _database_figures(scenario: Scenario) -> dict[str, dict[str, float]]:
    """What Prometheus must answer, read from job_runs, keyed like ``_prometheus_figures``."""
    rows = scenario.db.rows
    return {
        "succeeded": {
            j: float(n)
            for j, n in rows("SELECT job_name, count(*) FROM job_runs WHERE status = 'succeeded' GROUP BY 1")
        },
        "dead": {
            j: float(n) for j, n in rows("SELECT job_name, count(*) FROM job_runs WHERE status = 'dead' GROUP BY 1")
        },
        "started": {
            j: float(n)
            for j, n in rows("SELECT job_name, sum(attempts) FROM job_runs GROUP BY 1 HAVING sum(attempts) > 0")
        },
        "claims won": {
            j: float(n) for j, n in rows("SELECT job_name, count(*) FROM job_runs WHERE trigger = 'cron' GROUP BY 1")
        },
        "lateness count": {
            j: float(n) for j, n in rows("SELECT job_name, count(*) FROM job_runs WHERE attempts >= 1 GROUP BY 1")
        },
        "last success": {
            j: at.timestamp()
            for j, at in rows("SELECT job_name, max(finished_at) FROM job_runs WHERE status = 'succeeded' GROUP BY 1")
        },
    }


def _prometheus_figures(server: prometheus.PrometheusServer) -> dict[str, dict[str, float]]:
    def nonzero(expression: str) -> dict[str, float]:
        return {job: value for job, value in server.values(expression, "job_name").items() if value}

    return {
        "succeeded": nonzero('sum by (job_name) (tiffin_runs_finished_total{outcome="succeeded"})'),
        "dead": nonzero('sum by (job_name) (tiffin_runs_finished_total{outcome="dead"})'),
        "started": nonzero("sum by (job_name) (tiffin_runs_started_total)"),
        "claims won": nonzero('sum by (job_name) (tiffin_claims_total{result="won"})'),
        "lateness count": nonzero("sum by (job_name) (tiffin_run_start_lateness_seconds_count)"),
        "last success": server.values("max by (job_name) (tiffin_job_last_success_timestamp_seconds)", "job_name"),
    }


def _status(url: str, *, token: str = "") -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0  # not listening yet


def _wait_refused(url: str, *, what: str) -> None:
    """Wait until ``url`` answers, refusing a request without the token."""
    wait_for(lambda: _status(url) == 401, timeout=60, interval=0.2, what=f"{what} answering")


def test_prometheus_answers_what_job_runs_holds(scenario: Scenario, tmp_path: Path) -> None:
    prometheus.binary("prometheus")  # skip (or fail under CI) before starting anything
    clock = SimulatedTime.starting(datetime(2027, 3, 1, 12, 0, 30, tzinfo=UTC), speed=60, lead=2)
    env = {
        **clock.environment(),
        "METRICS_ENABLED": "1",
        "METRICS_BEARER_TOKEN": TOKEN,
        "METRICS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "SCHEDULER_EXTRA_JOB_MODULES": "tests.scenarios.jobs.metered",
    }
    port = free_port()
    scenario.fleet.start("web", ["runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}"], env=env)
    worker_ports = [free_port() for _ in range(2)]
    for i, worker_port in enumerate(worker_ports):
        worker_env = {**env, "Q_WORKERS": "2", "METRICS_WORKER_PORT": str(worker_port)}
        scenario.fleet.start(f"worker-{i}", ["worker"], env=worker_env)
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    _wait_refused(metrics_url, what="the web server's /metrics")
    # Each worker answers /metrics itself too (for workers with a directory of their own),
    # with the same token, and nothing else.
    for worker_port in worker_ports:
        worker_url = f"http://127.0.0.1:{worker_port}"
        _wait_refused(f"{worker_url}/metrics", what="a worker's /metrics")
        assert _status(f"{worker_url}/metrics", token=TOKEN) == 200
        assert _status(f"{worker_url}/admin/", token=TOKEN) == 404

    with prometheus.prometheus_server(target=f"127.0.0.1:{port}", tmp_path=tmp_path, token=TOKEN) as server:
        finished = "SELECT count(*) FROM job_runs WHERE job_name = %s AND status IN ('succeeded', 'dead')"
        wait_for(
            lambda: all(scenario.db.scalar(finished, [job]) >= RUNS_PER_JOB for job in JOBS),
            timeout=60,
            interval=0.2,
            what=f"{RUNS_PER_JOB} finished runs of each test job",
        )
        scenario.stop("worker")
        expected = _database_figures(scenario)
        answered: dict[str, dict[str, float]] = {}

        def agrees() -> bool:
            answered.update(_prometheus_figures(server))
            return answered == expected

        try:
            wait_for(agrees, timeout=30, interval=0.5, what="Prometheus answering what job_runs holds")
        except TimeoutError:
            assert answered == expected  # shows the difference
    assert expected["succeeded"]["metered-ok"] >= RUNS_PER_JOB
    assert expected["dead"]["metered-dies"] >= RUNS_PER_JOB
    assert "metered-dies" not in expected["last success"]
    # Four forked django-q2 workers executed the runs.
    workers = scenario.db.scalar("SELECT count(DISTINCT worker) FROM job_runs WHERE worker <> ''")
    assert workers >= 2
