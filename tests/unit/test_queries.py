"""The statements of scheduling.queries and scheduling.queries_sqlite are written out by
hand: each column list and status list in them must be the one the code around them reads."""

from __future__ import annotations

import re

from scheduling import queries, queries_sqlite, sql_sqlite
from scheduling.models import DUE_STATUSES, FINISHED_STATUSES, RARE_STATUSES, RETRY_STATUSES, JobRun
from scheduling.sql import CLAIM_COLUMNS, SCHEDULE_DECLARED_COLUMNS

RUN_COLUMNS = [field.column for field in JobRun._meta.concrete_fields]


def _names(listed: str) -> list[str]:
    return [name.strip() for name in listed.split(",")]


def test_every_statement_returning_runs_returns_every_column_in_the_models_order():
    # tiffin.db.fetch_instances reads every column of a run (the model's, in its field order).
    whole = {
        "CLAIM_RUNS": queries.CLAIM_RUNS,
        "queries_sqlite.CLAIM_RUNS": queries_sqlite.CLAIM_RUNS,
        "ENQUEUE_DUE_RUNS": queries.ENQUEUE_DUE_RUNS,
        "START_RUNS": queries.START_RUNS,
        "STALE_RUNS": queries.STALE_RUNS,
        "queries_sqlite.STALE_RUNS": queries_sqlite.STALE_RUNS,
        "RUNS_IN_FLIGHT": queries.RUNS_IN_FLIGHT,
    }
    for name, statement in whole.items():
        lists = re.findall(r"(?:RETURNING|SELECT) (id, job_name,.*?)\s+(?:\)|FROM|$)", statement, re.S)
        assert lists, name
        for listed in lists:
            assert _names(listed) == RUN_COLUMNS, name


def test_every_claim_inserts_the_claim_rows_columns_in_their_order():
    # The claim with a subject passes its values positionally, in ClaimRow's field order.
    for statement in (queries.CLAIM_RUNS, queries.CLAIM_RUN_WITH_SUBJECT, queries_sqlite.CLAIM_RUNS):
        (listed,) = re.findall(r"INSERT INTO job_runs \((.*?)\)", statement, re.S)
        assert _names(listed) == list(CLAIM_COLUMNS)
    (arrays,) = re.findall(r"unnest\((.*?)\n    \)", queries.CLAIM_RUNS, re.S)
    assert re.findall(r"%\((\w+)\)s", arrays) == list(CLAIM_COLUMNS)
    (keys,) = re.findall(r"SELECT (value.*?)\nFROM", queries_sqlite.CLAIM_RUNS, re.S)
    assert re.findall(r"value ->> '(\w+)'", keys) == list(CLAIM_COLUMNS)
    (positional,) = re.findall(r"VALUES \((.*)\)\n", queries.CLAIM_RUN_WITH_SUBJECT)
    assert positional.count("%s") == len(CLAIM_COLUMNS)


def test_the_due_statuses_are_the_partial_index_ones():
    due_reads = [queries.ENQUEUE_DUE_RUNS, queries.FIND_PASS_WORK, queries.FIRST_DUE_AT]
    for statement in [*due_reads, queries_sqlite.FIND_PASS_WORK, queries_sqlite.FIRST_DUE_AT, sql_sqlite.DUE_RUN_IDS]:
        (listed,) = re.findall(r"status IN \((.*?)\)", statement)
        assert [name.strip("'") for name in _names(listed)] == list(DUE_STATUSES)


def test_the_backlog_says_the_due_and_enqueued_index_conditions():
    due_lists = [_names(listed) for listed in re.findall(r"status IN \((.*?)\)", queries.BACKLOG)]
    assert [[name.strip("'") for name in listed] for listed in due_lists] == [list(DUE_STATUSES)] * 2  # job_run_due
    # job_run_enqueued_since, its condition as written: both reads of the enqueued runs.
    assert queries.BACKLOG.count("enqueued_at IS NOT NULL AND status = 'enqueued'") == 2


def test_each_kind_of_run_in_flight_says_its_index_condition_and_its_own_statuses():
    def statuses(branch: str) -> list[list[str]]:
        lists = [[name.strip("'") for name in _names(listed)] for listed in re.findall(r"status IN \((.*?)\)", branch)]
        return lists + [[name] for name in re.findall(r"status = '(\w+)'", branch)]

    due, retrying, enqueued, running = (statuses(branch) for branch in queries.RUNS_IN_FLIGHT.split("UNION ALL"))
    assert due == [list(DUE_STATUSES), ["scheduled"]]  # job_run_due
    assert retrying == [list(RARE_STATUSES), list(RETRY_STATUSES)]  # job_run_status_rare
    assert enqueued == [["enqueued"]]  # job_run_enqueued_since (with enqueued_at IS NOT NULL)
    assert running == [["running"]]  # job_run_running


def test_the_last_finishes_say_the_finished_index_condition_and_read_each_finished_status():
    (index,) = [index for index in JobRun._meta.indexes if index.name == "job_run_job_finished"]
    assert index.condition is not None
    ((lookup, condition),) = index.condition.children
    assert lookup == "status__in"
    (listed,) = re.findall(r"status IN \((.*?)\)", queries.LAST_FINISHES)
    assert [name.strip("'") for name in _names(listed)] == list(condition) == list(FINISHED_STATUSES)
    assert re.findall(r"SELECT '(\w+)'", queries.LAST_FINISHES) == list(FINISHED_STATUSES)


def test_the_sqlite_pass_reads_are_the_postgresql_ones_but_for_the_job_name_lists():
    def as_array(statement: str) -> str:
        # The due and stale runs' job test, which no index may serve: array_position on
        # PostgreSQL, +job_name on SQLite.
        listed = re.sub(
            r"\+job_name IN \(SELECT value FROM json_each\(%\((\w+)\)s\)\)",
            r"array_position(%(\1)s::text[], job_name) IS NOT NULL",
            statement,
        )
        listed = re.sub(
            r"job_name IN \(SELECT value FROM json_each\(%\((\w+)\)s\)\)", r"job_name = ANY(%(\1)s::text[])", listed
        )
        return " ".join(listed.split())

    for postgresql, sqlite in [
        (queries.FIND_PASS_WORK, queries_sqlite.FIND_PASS_WORK),
        (queries.FIRST_DUE_AT, queries_sqlite.FIRST_DUE_AT),
        # SQLite takes no row locks: its IMMEDIATE transactions hold the single write lock.
        (queries.STALE_RUNS.replace("FOR UPDATE SKIP LOCKED", ""), queries_sqlite.STALE_RUNS),
    ]:
        assert as_array(sqlite) == " ".join(postgresql.split())


def test_the_schedule_states_read_the_declared_columns_in_order():
    (listed,) = re.findall(r"s\.paused,(.*?),\s+CASE", queries.SCHEDULE_STATES, re.S)
    assert [name.removeprefix("s.") for name in _names(listed)] == list(SCHEDULE_DECLARED_COLUMNS)
