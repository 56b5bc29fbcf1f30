"""Fencing tokens carry an epoch: on PostgreSQL the primary's timeline above a 40-bit
counter (scheduling.queries.NEXT_FENCE, docs/failover.md). The failover itself is the
scenario tests/scenarios/test_failover_fence.py; here, one server: the token's parts,
the counter's refusal at its limit, and the epoch in /metrics."""

from __future__ import annotations

import pytest
from django.db import DataError, connection, transaction
from prometheus_client.parser import text_string_to_metric_families

from scheduling import sql

pytestmark = pytest.mark.postgres

COUNTER_MAX = 2**40 - 1


def _timeline() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT timeline_id FROM pg_control_checkpoint()")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db
def test_a_token_is_the_timeline_above_a_counter_and_each_is_greater_than_the_last() -> None:
    tokens = [sql.next_fence() for _ in range(3)]

    assert tokens == sorted(set(tokens))
    # The server has not been promoted since its last checkpoint, so both readings agree.
    assert {sql.fence_epoch(token) for token in tokens} == {_timeline()}
    assert all(0 < token % 2**sql.FENCE_COUNTER_BITS <= COUNTER_MAX for token in tokens)
    # Every token from before epochs (the bare counter) is below every token with one.
    assert min(tokens) > COUNTER_MAX
    assert 1 << sql.FENCE_COUNTER_BITS == 1099511627776  # the literal in NEXT_FENCE


@pytest.mark.django_db(transaction=True)
def test_the_counter_refuses_past_two_to_the_forty_instead_of_carrying_into_the_epoch() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value, is_called FROM job_runs_fence_seq")
        last_value, is_called = cursor.fetchone()
        cursor.execute("SELECT setval('job_runs_fence_seq', %s)", [COUNTER_MAX])
    try:
        with pytest.raises(DataError, match="reached maximum value"), transaction.atomic():
            sql.next_fence()
    finally:
        with connection.cursor() as cursor:  # a sequence is outside transactions: put it back
            cursor.execute("SELECT setval('job_runs_fence_seq', %s, %s)", [last_value, is_called])


@pytest.mark.django_db
def test_metrics_show_the_epoch_and_the_newest_token(client, settings) -> None:
    settings.METRICS_ENABLED = True
    settings.METRICS_BEARER_TOKEN = ""
    settings.METRICS_MULTIPROC_DIR = ""
    token = sql.next_fence()

    response = client.get("/metrics")

    assert response.status_code == 200
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert samples["tiffin_fence_epoch"] == sql.fence_epoch(token) == _timeline()
    assert samples["tiffin_fence_token_highest"] == token
