"""Registration, declaration checks and fencing rules."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection, transaction

from scheduling.checks import check_job_declarations
from scheduling.fencing import StaleFenceError, fence_check
from scheduling.models import Misfire, Schedule
from scheduling.registry import registry
from scheduling.schedules import schedules_register
from tests.engine import T0, make_job


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (make_job("bad-cron", cron="61 * * * *"), "job 'bad-cron': cron:"),
        (make_job("bad-zone", timezone="Mars/Olympus_Mons"), "job 'bad-zone': timezone:"),
        (make_job("bad-deadline", misfire=Misfire.DEADLINE), "job 'bad-deadline': misfire: 'deadline' needs"),
        (make_job("bad-policy", overlap="sometimes"), "job 'bad-policy': overlap: 'sometimes'"),
        (make_job("bad-attempts", max_attempts=0), "job 'bad-attempts': max_attempts"),
    ],
)
def test_the_system_check_names_the_job_and_the_bad_declaration(job, expected):
    with registry.replaced(job):
        errors = check_job_declarations()
    assert len(errors) == 1
    assert errors[0].msg.startswith(expected)


def test_the_system_check_accepts_good_declarations():
    with registry.replaced(make_job("fine", cron="30 20 * * 0", timezone="Asia/Kolkata")):
        assert check_job_declarations() == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_servers_registering_at_once_leave_one_row_per_job():
    jobs = [make_job(f"job-{n}") for n in range(3)]
    barrier = threading.Barrier(8)

    def register(offset: int) -> None:
        try:
            barrier.wait()
            schedules_register(now=T0 + timedelta(seconds=offset))
        finally:
            connection.close()

    with registry.replaced(*jobs), ThreadPoolExecutor(8) as pool:
        list(pool.map(register, range(8)))
    assert Schedule.objects.count() == 3


@pytest.mark.django_db
def test_a_changed_declaration_updates_the_row_but_keeps_first_seen_and_paused():
    with registry.replaced(make_job("moving", cron="0 * * * *")):
        schedules_register(now=T0)
    Schedule.objects.filter(job_name="moving").update(paused=True)
    with registry.replaced(make_job("moving", cron="30 * * * *")):
        schedules_register(now=T0 + timedelta(days=1))
    row = Schedule.objects.get(job_name="moving")
    assert (row.cron, row.first_seen_at, row.paused) == ("30 * * * *", T0, True)


@pytest.mark.django_db
def test_fence_check_accepts_equal_or_higher_tokens_and_refuses_lower_ones():
    with transaction.atomic():
        fence_check("ledger", 5, now=T0)
        fence_check("ledger", 5, now=T0)
        fence_check("ledger", 9, now=T0)
    with pytest.raises(StaleFenceError, match="fence 7 is stale for 'ledger'"), transaction.atomic():
        fence_check("ledger", 7, now=T0)
    with transaction.atomic():
        fence_check("other-ledger", 1, now=T0)


# transaction=True: the default test wrapper is itself a transaction.
@pytest.mark.django_db(transaction=True)
def test_fence_check_outside_a_transaction_is_a_programming_error():
    with pytest.raises(RuntimeError, match="inside the transaction"):
        fence_check("ledger", 1, now=T0)
