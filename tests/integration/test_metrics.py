"""/metrics in one process: access, the figures against job_runs, promtool's verdicts on
a scrape and on the shipped rules, and the plans of the scrape's queries."""

from __future__ import annotations

import re
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from operations.metrics import _backlog, jobs_last_finishes, schedule_interval_seconds
from scheduling import services
from scheduling.execution import runs_execute
from scheduling.models import JobRun, RunStatus
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests import prometheus
from tests.engine import T0, make_job
from tests.plans import statements_on
from tiffin.db import adapt


def _boom(ctx):
    raise ValueError("boom")


OK = make_job("metrics-ok", cron="*/5 * * * *")
DIES = make_job("metrics-dies", cron="0 * * * *", handler=_boom, max_attempts=1)


@pytest.fixture
def metrics_on(settings):
    settings.METRICS_ENABLED = True
    settings.METRICS_BEARER_TOKEN = ""
    settings.METRICS_MULTIPROC_DIR = ""
    return settings


def _value(samples, name: str, **labels: str) -> float:
    return samples[name][tuple(sorted(labels.items()))]


def _run(job, minutes: int):
    at = T0 + timedelta(minutes=minutes)
    run = services.run_claim_manual(job_name=job.name, scheduled_for=at, now=at, enqueue=False)
    assert run is not None
    with time_machine.travel(at + timedelta(seconds=3), tick=False):
        runs_execute(run_ids=[run.id], worker="test")
    run.refresh_from_db()
    return run


@pytest.mark.django_db
def test_it_is_off_unless_enabled(client, settings):
    settings.METRICS_ENABLED = False
    assert client.get("/metrics").status_code == 404


@pytest.mark.django_db
def test_an_enabled_token_refuses_a_scrape_without_it(client, metrics_on):
    metrics_on.METRICS_BEARER_TOKEN = "s3cret-token"
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert b"tiffin_" not in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong-token").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic s3cret-token").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200


@pytest.mark.django_db
def test_it_is_answered_without_a_login_on_plain_http_from_any_host(client, metrics_on):
    # Production settings: HTTPS redirect on, and a pod address is not in ALLOWED_HOSTS.
    metrics_on.SECURE_SSL_REDIRECT = True
    response = client.get("/metrics", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")


@pytest.mark.django_db
def test_the_figures_match_job_runs(client, metrics_on, django_capture_on_commit_callbacks):
    with registry.replaced(OK, DIES):
        schedules_register(now=T0)
        before = prometheus.scrape(client)
        with django_capture_on_commit_callbacks(execute=True):
            first, second, dead = _run(OK, 0), _run(OK, 5), _run(DIES, 0)
        with time_machine.travel(T0 + timedelta(minutes=6), tick=False):
            after = prometheus.scrape(client)
    assert (first.status, second.status, dead.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.DEAD)

    def grew(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - before.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    assert _value(after, "tiffin_job_last_success_timestamp_seconds", job_name="metrics-ok") == (
        second.finished_at.timestamp()
    )
    assert "metrics-dies" not in str(after["tiffin_job_last_success_timestamp_seconds"])
    assert _value(after, "tiffin_job_last_run_status", job_name="metrics-dies", status="dead") == 1
    assert _value(after, "tiffin_job_last_run_status", job_name="metrics-dies", status="succeeded") == 0
    assert _value(after, "tiffin_runs", job_name="metrics-ok", status="succeeded") == 2
    assert _value(after, "tiffin_runs", job_name="metrics-dies", status="dead") == 1
    assert grew("tiffin_runs_started_total", job_name="metrics-ok") == 2
    assert grew("tiffin_runs_finished_total", job_name="metrics-ok", outcome="succeeded") == 2
    assert grew("tiffin_runs_finished_total", job_name="metrics-dies", outcome="dead") == 1
    assert grew("tiffin_run_start_lateness_seconds_count", job_name="metrics-ok") == 2
    # Both started 3 s after their logical time: inside the 5 s bucket, outside the 2.5 s one.
    assert grew("tiffin_run_start_lateness_seconds_bucket", job_name="metrics-ok", le="5.0") == 2
    assert grew("tiffin_run_start_lateness_seconds_bucket", job_name="metrics-ok", le="2.5") == 0
    assert _value(after, "tiffin_job_expected_interval_seconds", job_name="metrics-ok") == 300
    assert _value(after, "tiffin_fence_token_highest") >= dead.fence
    assert _value(after, "tiffin_backlog_runs") == 0


@pytest.mark.django_db
def test_a_rolled_back_start_is_not_counted(client, metrics_on):
    """Counts wait for their transaction's commit: here the test's transaction never
    commits, so nothing is counted (the totals must equal the rows that exist)."""
    with registry.replaced(OK):
        schedules_register(now=T0)
        before = prometheus.scrape(client)
        _run(OK, 10)
        after = prometheus.scrape(client)
    key = (("job_name", "metrics-ok"),)
    assert after["tiffin_runs_started_total"].get(key) == before["tiffin_runs_started_total"].get(key)


@pytest.mark.django_db
def test_the_backlog_is_the_runs_due_and_not_started(client, metrics_on):
    with registry.replaced(OK):
        schedules_register(now=T0)
        for minutes in (0, 5):
            at = T0 + timedelta(minutes=minutes)
            services.run_claim_manual(job_name=OK.name, scheduled_for=at, now=at, enqueue=False)
        with time_machine.travel(T0 + timedelta(minutes=7), tick=False):
            samples = prometheus.scrape(client)
    assert JobRun.objects.filter(status=RunStatus.ENQUEUED).count() == 2
    assert _value(samples, "tiffin_backlog_runs") == 2
    assert _value(samples, "tiffin_backlog_oldest_age_seconds") == 7 * 60


def test_a_schedules_interval_is_its_longest_gap():
    assert schedule_interval_seconds("30 20 * * 0", "UTC", 2027) == 7 * 86400
    assert schedule_interval_seconds("0 9,17 * * 1-5", "UTC", 2027) == 64 * 3600  # Friday 17:00 to Monday 09:00
    # A local daily time gains an hour over the autumn change (Europe/London, 25 h).
    assert schedule_interval_seconds("0 2 * * *", "Europe/London", 2027) == 25 * 3600
    assert schedule_interval_seconds("0 0 30 2 *", "UTC", 2027) is None


@pytest.mark.django_db
def test_promtool_check_metrics_reports_nothing_on_a_scrape(client, metrics_on, django_capture_on_commit_callbacks):
    with registry.replaced(OK, DIES):
        schedules_register(now=T0)
        with django_capture_on_commit_callbacks(execute=True):
            _run(OK, 0), _run(DIES, 0)
        scrape = client.get("/metrics").content.decode()
    checked = prometheus.promtool("check", "metrics", stdin=scrape)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (checked.stdout + checked.stderr).strip() == ""


def test_promtool_check_rules_passes_on_the_shipped_alerts():
    checked = prometheus.promtool("check", "rules", str(prometheus.RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout


def test_promtool_test_rules_passes_on_the_shipped_alerts():
    tested = prometheus.promtool("test", "rules", str(prometheus.RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_promtool_check_config_passes_on_the_scrape_example(tmp_path: Path):
    # The example reads its token from a file beside it, as a deployment would.
    for source in (prometheus.SCRAPE_CONFIG, prometheus.RULES):
        shutil.copy(source, tmp_path / source.name)
    (tmp_path / "tiffin-metrics-token").write_text("a-token\n")
    checked = prometheus.promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.postgres
@pytest.mark.django_db
def test_every_query_of_a_scrape_can_be_served_without_a_scan_of_job_runs(client, metrics_on):
    """With sequential scans disabled, PostgreSQL still chooses a Seq Scan for a query no
    index can serve; none of the scrape's queries on job_runs gets one."""
    with registry.replaced(OK, DIES):
        schedules_register(now=T0)
        with CaptureQueriesContext(connection) as scrape:
            client.get("/metrics")
    queries = [query["sql"] for query in scrape.captured_queries if re.search(r"\bjob_runs\b", query["sql"])]
    assert len(queries) >= 4  # last finishes (one query), the window, the backlog (one), the old epoch's runs
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for query in queries:
            cursor.execute(f"EXPLAIN {query}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Seq Scan on job_runs" not in plan, f"{query}\n{plan}"


def test_the_deploy_check_warns_of_metrics_without_a_directory(settings):
    from scheduling.checks import check_metrics_directory

    settings.METRICS_ENABLED, settings.METRICS_MULTIPROC_DIR = True, ""
    assert [warning.id for warning in check_metrics_directory()] == ["scheduling.W001"]
    settings.METRICS_MULTIPROC_DIR = "/tmp/tiffin-metrics"
    assert check_metrics_directory() == []


# 20,000 runs of a job on SQLite, a second apart from an instant, of one status and finish:
# the job, a subject prefix, the first scheduled_for and due_at, the status, created_at, finished_at.
SQLITE_RUNS = """
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
    INSERT INTO job_runs (job_name, subject, scheduled_for, due_at, status, trigger, attempts, created_at,
                          finished_at, worker, skip_reason, error, overlap)
    SELECT %s, %s || i, datetime(%s, '+' || i || ' seconds'), datetime(%s, '+' || i || ' seconds'),
           %s, 'delayed', 0, %s, %s, '', '', '', '' FROM n
"""


@pytest.mark.django_db
def test_on_sqlite_the_backlog_is_read_through_the_due_and_enqueued_indexes():
    # SQLite's planner uses a partial index only when the statement says its condition as
    # written, never through a list of parameters (PostgreSQL's plans: test_job_run_plans).
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's plan")
    with connection.cursor() as cursor:
        # Finished before T0, and claimed for after it.
        early, late = adapt(T0 - timedelta(days=1)), adapt(T0 + timedelta(minutes=1))
        cursor.execute(SQLITE_RUNS, [OK.name, "finished:", early, early, RunStatus.SUCCEEDED, early, early])
        cursor.execute(SQLITE_RUNS, [OK.name, "later:", late, late, RunStatus.SCHEDULED, early, None])
        cursor.execute("ANALYZE job_runs")
    scans = []
    for statement, params in statements_on("job_runs", lambda: list(_backlog(T0))):
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + statement, params)
            scans += [row[-1] for row in cursor.fetchall() if re.match(r"(SCAN|SEARCH) job_runs", row[-1])]
    indexes = [re.search(r"USING (?:COVERING )?INDEX (\w+)", scan) for scan in scans]
    assert {index[1] if index else scan for index, scan in zip(indexes, scans, strict=True)} == {
        "job_run_due",
        "job_run_enqueued_since",
    }


@pytest.mark.django_db
def test_on_sqlite_each_last_finish_is_one_step_of_the_finished_index():
    # The last finishes name job_run_job_finished's condition as written: with only
    # ``status = %s`` SQLite read every run of the job through job_run_by_job and sorted
    # them, once per job and status (PostgreSQL's plans: test_job_run_plans).
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's plan")
    early, dead = T0 - timedelta(days=30), T0 - timedelta(days=2)
    with registry.replaced(OK, DIES):
        schedules_register(now=T0)
        with connection.cursor() as cursor:
            at = adapt(early)
            for job in (OK, DIES):
                cursor.execute(SQLITE_RUNS, [job.name, "ok:", at, at, RunStatus.SUCCEEDED, at, at])
                cursor.execute(SQLITE_RUNS, [job.name, "dead:", at, at, RunStatus.DEAD, at, adapt(dead)])
            cursor.execute("ANALYZE job_runs")
        finishes = jobs_last_finishes()
        (statement, params), *others = statements_on("job_runs", jobs_last_finishes)
    assert not others, others
    nothing = {"failed": None, "abandoned": None, "skipped": None, "superseded": None}
    assert finishes[OK.name] == finishes[DIES.name] == {"succeeded": early, "dead": dead, **nothing}
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + statement, params)
        steps = [row[-1] for row in cursor.fetchall()]
    scans = [step for step in steps if re.match(r"(SCAN|SEARCH) (job_runs|U0)\b", step)]
    # A search of the index per job and status, no sort of the job's runs.
    assert scans and all("COVERING INDEX job_run_job_finished (job_name=? AND status=?" in scan for scan in scans), (
        steps
    )
    assert not [step for step in steps if "TEMP B-TREE" in step], steps
