"""Statements: every payout's weekly email, written with the payout and mailed at least once
with one stable Message-ID, against a REAL SMTP server (aiosmtpd in its own process group,
``tests/smtp_sink.py``) and PostgreSQL.

Django's in-memory backend is kept out: pytest-django sets EMAIL_BACKEND to it, and each
test asserts ``mail.outbox`` stays empty, so every message counted here crossed a socket.
The tests count the copies the server recorded of each Message-ID: a duplicate is a second
copy of the same id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core import mail
from django.db import IntegrityError, connection
from django.urls import reverse

from operations.monitoring import CheckWindow
from orders.models import Restaurant
from payouts.models import Payout
from payouts.services import payouts_pay_due
from scheduling.fencing import StaleFenceError
from scheduling.models import RunAlert
from statements.errors import StatementError
from statements.jobs import statements_sent
from statements.models import SEND_STATEMENTS_JOB, Statement, StatementStatus, statement_message_id
from statements.services import (
    SendResult,
    StatementPayout,
    statement_attempt_begin,
    statement_body,
    statement_mail,
    statement_record_sent,
    statement_retry,
    statement_template,
    statements_send_due,
)
from statements.sql import body_format
from support.ports import free_port
from tests.engine import pay
from tests.fences import TokenOnly
from tests.outbox import AS_OF, PAID_AT, Clock, due_again, paid_restaurants, sender_run
from tests.smtp_sink import RunningSmtpServer, running_smtp_server

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

DOMAIN = "statements.test.invalid"


@pytest.fixture(autouse=True)
def statement_settings(settings: Any) -> None:
    settings.STATEMENTS_MESSAGE_ID_DOMAIN = DOMAIN
    settings.STATEMENTS_EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.DEFAULT_FROM_EMAIL = "statements@tiffin.test"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_TIMEOUT = 2.0
    settings.STATEMENTS_RETRY_BASE_SECONDS = 60.0


@pytest.fixture
def smtp(tmp_path: Path, settings: Any) -> Iterator[RunningSmtpServer]:
    with running_smtp_server(directory=tmp_path / "smtp") as server:
        settings.EMAIL_PORT = server.port
        yield server


@pytest.fixture
def paid(restaurant_factory: Any, order_factory: Any) -> Callable[..., list[Restaurant]]:
    """``count`` Kolkata restaurants, each with orders in the weeks of 8 and 15 March and
    none in the week of 1 March (a zero payout), and a statement email unless
    ``with_email`` is off; then the weekly-payouts run as of AS_OF."""

    def make(count: int = 1, *, with_email: bool = True) -> list[Restaurant]:
        return paid_restaurants(
            restaurant_factory,
            order_factory,
            count=count,
            orders=lambda number: ((10, "12345.67"), (11, "1000.00"), (16, f"{200 + number}.05")),
            fields=lambda restaurant: {"statement_email": f"owner{restaurant.id}@example.com"} if with_email else {},
        )

    return make


def send_pass(clock: Clock, *, fence: int = 1) -> dict[str, int]:
    return statements_send_due(fence=fence, job_run_id=None, read_clock=clock, batch_size=50)


def copies(server: RunningSmtpServer) -> Counter[str]:
    """How many copies of each Message-ID the server took."""
    return Counter(str(message["Message-ID"]) for message in server.messages())


def test_a_payout_run_writes_one_statement_per_payout(paid: Any) -> None:
    restaurants = paid(2)
    payouts = list(Payout.objects.order_by("restaurant_id", "period_start"))
    assert len(payouts) == 6  # three weeks each, the first with no orders
    for payout in payouts:
        statement = Statement.objects.get(payout_id=payout.pk)
        assert (statement.restaurant_id, statement.period_start) == (payout.restaurant_id, payout.period_start)
        assert statement.message_id == (
            f"<payout-{payout.restaurant_id}-{payout.period_start.astimezone(UTC):%Y%m%dT%H%M%SZ}@{DOMAIN}>"
        )
        assert statement.status == StatementStatus.PENDING and statement.next_attempt_at == PAID_AT
        assert statement.recipient == f"owner{payout.restaurant_id}@example.com"
        assert statement.created_at == payout.created_at
    # The week of 8 March: 13,345.67 gross at 15 %, rendered with thousands separators.
    week = Payout.objects.get(restaurant=restaurants[0], order_count=2)
    body = Statement.objects.get(payout_id=week.pk).body
    assert week.gross == Decimal("13345.67") and week.net == Decimal("11343.82")
    for line in ("Orders delivered   2", "Gross              13,345.67", "Net paid to you    11,343.82"):
        assert line in body
    assert "Commission         2,001.85 (15.00 %)" in body
    zero = Statement.objects.get(payout__restaurant=restaurants[0], payout__order_count=0)
    assert "Net paid to you    0.00" in zero.body  # a zero week still has its statement


def test_the_database_renders_each_statement_as_python_does(paid: Any) -> None:
    """PostgreSQL writes the statements with the payouts' INSERT ... SELECT
    (statements/sql.py); the text is what ``statement_body`` renders in Python (SQLite's
    path), byte for byte: for the pass's own payouts, and for amounts, counts, rates and
    dates at the edges (thousands, zero, the largest net a payout holds, a one-digit day,
    the longest month name)."""
    paid(2)
    for statement in Statement.objects.select_related("payout", "restaurant"):
        payout, restaurant = statement.payout, statement.restaurant
        assert (
            statement.subject
            == f"{restaurant.name}: Tiffin statement for the week of {payout.week_start_local:%d %b %Y}"
        )
        assert statement.body == python_body(payout, restaurant.name, restaurant.timezone)
    template = statement_template()
    text, expressions = body_format(template)
    cases = [
        ("0.00", "0.00", "0.00", 0, "0.0500", date(2026, 9, 7), datetime(2026, 9, 6, 18, 30, tzinfo=UTC)),
        ("1234.50", "61.73", "1172.77", 7, "0.0500", date(2026, 3, 2), datetime(2026, 3, 1, 18, 30, tzinfo=UTC)),
        ("999.99", "99.99", "900.00", 1000, "0.1000", date(2026, 12, 28), datetime(2026, 12, 28, 5, 0, tzinfo=UTC)),
        (
            "214748364700000.00", "21474836470000.00", "193273528230000.00", 2_147_483_647, "0.1000",
            date(2027, 1, 4), datetime(2027, 1, 4, 0, 0, tzinfo=UTC),
        ),
        ("100.00", "5.75", "94.25", 3, "0.0575", date(2026, 11, 2), datetime(2026, 11, 2, 4, 0, tzinfo=UTC)),
    ]  # fmt: skip
    with connection.cursor() as cursor:
        for gross, commission, net, count, rate, week, start in cases:
            cursor.execute(
                f"SELECT format(%(body_format)s, {', '.join(expressions)}) FROM (SELECT %(gross)s::numeric(17, 2) AS "
                "gross, %(commission)s::numeric(17, 2) AS commission, %(net)s::numeric(17, 2) AS net, %(count)s::int "
                "AS order_count, %(rate)s::numeric(5, 4) AS commission_rate, %(week)s::date AS week_start_local, "
                "%(start)s::timestamptz AS period_start, %(end)s::timestamptz AS period_end, 7 AS restaurant_id) p, "
                "(SELECT %(name)s::text AS name, 'Asia/Kolkata' AS timezone) r",
                {
                    "body_format": text, "domain": DOMAIN, "gross": gross, "commission": commission, "net": net,
                    "count": count, "rate": rate, "week": week, "start": start, "end": start + timedelta(days=7),
                    "name": "Dosa & 100% Co.",
                },
            )  # fmt: skip
            payout = Payout(
                restaurant_id=7, gross=Decimal(gross), commission=Decimal(commission), net=Decimal(net),
                order_count=count, commission_rate=Decimal(rate), week_start_local=week, period_start=start,
                period_end=start + timedelta(days=7),
            )  # fmt: skip
            assert cursor.fetchone()[0] == python_body(payout, "Dosa & 100% Co.", "Asia/Kolkata")


def python_body(payout: Payout, name: str, zone: str) -> str:
    """The body ``statement_body`` renders for ``payout`` (SQLite's path)."""
    restaurant_id, period_start = payout.restaurant_id, payout.period_start
    message_id = statement_message_id(restaurant_id=restaurant_id, period_start=period_start, domain=DOMAIN)
    fields = StatementPayout(
        id=payout.pk, restaurant_id=payout.restaurant_id, week_start_local=payout.week_start_local,
        period_start=payout.period_start, period_end=payout.period_end, order_count=payout.order_count,
        gross=payout.gross, commission=payout.commission, commission_rate=payout.commission_rate, net=payout.net,
    )  # fmt: skip
    template = statement_template()
    return statement_body(payout=fields, restaurant=name, zone=zone, message_id=message_id, template=template)


def test_statements_roll_back_with_their_payouts(restaurant_factory: Any, order_factory: Any) -> None:
    """A statement that cannot be written takes its payout with it: a planted row squats
    on the identity of one restaurant's next payout, so its statement INSERT fails, and
    no payout without its statement remains (the batch fails whole, or, where the payout
    pass isolates a restaurant the database refuses, that restaurant alone is unpaid)."""
    restaurant = restaurant_factory(onboarded_at=datetime(2027, 3, 1, tzinfo=UTC))
    restaurant_factory(onboarded_at=datetime(2027, 3, 1, tzinfo=UTC))
    Restaurant.objects.update(statement_email="owner@example.com")
    pay(AS_OF - timedelta(days=7), clock_at=PAID_AT - timedelta(days=7))  # the weeks of 1 and 8 March
    last = Payout.objects.filter(restaurant=restaurant).order_by("-period_start").first()
    assert last is not None and Payout.objects.count() == 4 and Statement.objects.count() == 4
    Statement.objects.create(
        payout_id=10**9,  # no such payout: this row only squats on the next week's identity
        restaurant=restaurant,
        period_start=last.period_end,
        recipient="owner@example.com",
        subject="squatter",
        body="",
        message_id="<squatter@test>",
        status=StatementStatus.SENT,
        sent_at=PAID_AT,
        created_at=PAID_AT,
    )
    try:
        payouts_pay_due(as_of=AS_OF, run=TokenOnly(fence=2**62, now=PAID_AT), now=PAID_AT)
    except IntegrityError as error:  # the whole batch rolled back
        assert "statement_one_per_payout_identity" in str(error)
        assert Payout.objects.count() == 4 and Statement.objects.count() == 5
    assert not Payout.objects.filter(restaurant=restaurant, period_start=last.period_end).exists()
    assert not Payout.objects.filter(statement__isnull=True).exists()  # every payout has its statement


def only_one_unsent() -> Statement:
    """The statement of the payout with two orders, left the only one to mail (the others
    recorded as sent)."""
    statement = Statement.objects.get(payout__order_count=2)
    Statement.objects.exclude(id=statement.id).update(status=StatementStatus.SENT, sent_at=PAID_AT)
    return statement


def test_the_send_job_mails_each_statement_once_with_its_message_id(paid: Any, smtp: RunningSmtpServer) -> None:
    paid(2)
    run = sender_run(SEND_STATEMENTS_JOB, scheduled_for=PAID_AT, at=PAID_AT + timedelta(minutes=1))
    assert run.result == {"attached": 0, "sent": 6}
    statements = {s.message_id: s for s in Statement.objects.all()}
    assert copies(smtp) == Counter(dict.fromkeys(statements, 1))
    for message in smtp.messages():
        statement = statements[str(message["Message-ID"])]
        assert message["To"] == statement.recipient and message["Subject"] == statement.subject
        assert message["From"] == "statements@tiffin.test"
        payload = message.get_payload(decode=True)
        assert (
            isinstance(payload, bytes) and payload.decode().replace("\r\n", "\n") == statement.body
        )  # SMTP lines end in CRLF
        assert statement.status == StatementStatus.SENT and statement.attempts == 1
    assert mail.outbox == []  # the in-memory backend saw nothing: all went over SMTP
    assert send_pass(Clock(PAID_AT + timedelta(days=1))) == {"attached": 0}  # nothing left to send


def test_accepted_then_connection_dropped_mails_exactly_one_duplicate(paid: Any, smtp: RunningSmtpServer) -> None:
    """The server took the message and the connection dropped before its 250: the sender
    cannot know, retries with the same Message-ID, and the receiver holds two copies."""
    paid(1)
    statement = only_one_unsent()
    clock = Clock(PAID_AT)
    smtp.fail_next("drop-after-data")
    assert send_pass(clock) == {"attached": 0, "retrying": 1}
    statement.refresh_from_db()
    assert statement.status == StatementStatus.PENDING and "SMTPServerDisconnected" in statement.last_error
    assert copies(smtp) == Counter({statement.message_id: 1})  # taken, though the sender does not know
    clock.at = due_again(statement) - timedelta(seconds=1)
    assert send_pass(clock) == {"attached": 0}  # the backoff holds
    clock.at = due_again(statement)
    assert send_pass(clock) == {"attached": 0, "sent": 1}
    assert copies(smtp) == Counter({statement.message_id: 2})  # exactly one duplicate, same Message-ID
    statement.refresh_from_db()
    assert statement.status == StatementStatus.SENT and statement.attempts == 2
    assert mail.outbox == []


def test_server_down_then_up_mails_no_duplicate(paid: Any, tmp_path: Path, settings: Any) -> None:
    paid(1)
    statement = only_one_unsent()
    settings.EMAIL_PORT = free_port()  # nothing listens there yet
    clock = Clock(PAID_AT)
    assert send_pass(clock) == {"attached": 0, "retrying": 1}
    statement.refresh_from_db()
    assert "ConnectionRefusedError" in statement.last_error
    with running_smtp_server(directory=tmp_path / "smtp", port=settings.EMAIL_PORT) as smtp:
        clock.at = due_again(statement)
        assert send_pass(clock) == {"attached": 0, "sent": 1}
        assert copies(smtp) == Counter({statement.message_id: 1})  # no duplicate
    assert mail.outbox == []


def test_a_temporary_refusal_mails_no_duplicate(paid: Any, smtp: RunningSmtpServer) -> None:
    paid(1)
    statement = only_one_unsent()
    clock = Clock(PAID_AT)
    smtp.fail_next("451", "451")
    assert send_pass(clock) == {"attached": 0, "retrying": 1}
    first_wait = due_again(statement) - clock.at
    clock.at = due_again(statement)
    assert send_pass(clock) == {"attached": 0, "retrying": 1}
    assert due_again(statement) - clock.at > first_wait  # the backoff grows
    clock.at = due_again(statement)
    assert send_pass(clock) == {"attached": 0, "sent": 1}
    assert copies(smtp) == Counter({statement.message_id: 1})


def test_a_worker_killed_between_send_and_commit_mails_one_duplicate(paid: Any, smtp: RunningSmtpServer) -> None:
    """Steps 1 and 2 of ``statement_send`` and no step 3 (what a SIGKILL after the 250
    leaves): the lease runs out, the next run mails it again under the same Message-ID."""
    paid(1)
    statement = only_one_unsent()
    taken = statement_attempt_begin(statement_id=statement.id, fence=1, job_run_id=None, now=PAID_AT)
    assert taken is not None
    statement_mail(statement=taken)  # the server says 250; the worker dies before recording it
    clock = Clock(PAID_AT + timedelta(seconds=1))
    assert send_pass(clock, fence=2) == {"attached": 0}  # leased to the dead worker for now
    clock.at = due_again(statement)
    assert send_pass(clock, fence=2) == {"attached": 0, "sent": 1}
    assert copies(smtp) == Counter({statement.message_id: 2})  # one duplicate


def test_two_senders_mail_a_statement_once(paid: Any, smtp: RunningSmtpServer) -> None:
    """A second sender that comes while the first is mid-conversation finds the statement
    leased and leaves it; the first records it under its fence."""
    paid(1)
    statement = only_one_unsent()
    taken = statement_attempt_begin(statement_id=statement.id, fence=1, job_run_id=None, now=PAID_AT)
    assert taken is not None
    assert send_pass(Clock(PAID_AT), fence=2) == {"attached": 0}  # the second sender: nothing due
    statement_mail(statement=taken)
    assert statement_record_sent(taken, fence=1, job_run_id=None, now=PAID_AT) == SendResult.SENT
    assert copies(smtp) == Counter({statement.message_id: 1})


def test_a_statement_without_a_recipient_waits_until_one_is_entered(paid: Any, smtp: RunningSmtpServer) -> None:
    [restaurant] = paid(1, with_email=False)
    assert set(Statement.objects.values_list("status", "recipient")) == {(StatementStatus.WAITING_RECIPIENT, "")}
    clock = Clock(PAID_AT + timedelta(days=1))
    assert send_pass(clock) == {"attached": 0}
    assert copies(smtp) == Counter()
    Restaurant.objects.filter(id=restaurant.id).update(statement_email="late@example.com")
    assert send_pass(clock) == {"attached": 3, "sent": 3}
    assert [message["To"] for message in smtp.messages()] == ["late@example.com"] * 3
    assert set(Statement.objects.values_list("status", "recipient")) == {(StatementStatus.SENT, "late@example.com")}


def test_the_message_id_comes_from_the_business_identity_only() -> None:
    start = datetime(2027, 3, 7, 18, 30, tzinfo=UTC)
    assert statement_message_id(restaurant_id=7, period_start=start, domain="x.example") == (
        "<payout-7-20270307T183000Z@x.example>"
    )


def test_the_admin_shows_the_statement_email_and_the_outbox_read_only(
    admin_client: Any, admin_pages: None, paid: Any
) -> None:
    [restaurant] = paid(1)
    page = admin_client.get(reverse("admin:orders_restaurant_change", args=[restaurant.pk]))
    assert page.status_code == 200
    assert b'name="statement_email"' in page.content and f"owner{restaurant.pk}@example.com".encode() in page.content
    outbox = admin_client.get(reverse("admin:statements_statement_changelist") + "?status=pending")
    assert outbox.status_code == 200 and outbox.context["cl"].result_count == 3
    statement = Statement.objects.first()
    assert statement is not None
    change = reverse("admin:statements_statement_change", args=[statement.pk])
    assert admin_client.post(change, {"subject": "edited"}).status_code == 403  # frozen
    assert admin_client.get(reverse("admin:statements_statement_add")).status_code == 403


def test_a_sender_paused_past_its_lease_mails_one_duplicate_and_records_nothing(
    paid: Any, smtp: RunningSmtpServer
) -> None:
    """The paused sender's mail goes out (nothing can stop it), but its record is refused
    by the fence once the run that replaced it has recorded the statement."""
    paid(1)
    statement = only_one_unsent()
    paused = statement_attempt_begin(statement_id=statement.id, fence=1, job_run_id=None, now=PAID_AT)
    assert paused is not None
    clock = Clock(due_again(statement))  # the lease ran out while it was paused
    assert send_pass(clock, fence=2) == {"attached": 0, "sent": 1}
    statement_mail(statement=paused)  # it wakes up mid-conversation and finishes
    with pytest.raises(StaleFenceError):
        statement_record_sent(paused, fence=1, job_run_id=None, now=clock.at)
    assert copies(smtp) == Counter({statement.message_id: 2})  # one duplicate, same Message-ID
    statement.refresh_from_db()
    assert statement.status == StatementStatus.SENT and statement.attempts == 2


def test_an_unsent_statement_is_a_problem_after_the_grace(paid: Any, settings: Any) -> None:
    settings.STATEMENTS_UNSENT_GRACE_SECONDS = 3600
    paid(1, with_email=False)
    assert statements_sent(CheckWindow.ending(PAID_AT + timedelta(minutes=59))) == []
    problems = statements_sent(CheckWindow.ending(PAID_AT + timedelta(hours=2)))
    assert len(problems) == 3
    assert {problem.subject for problem in problems} == {f"statement:{s.message_id}" for s in Statement.objects.all()}
    assert all("no statement_email" in problem.detail for problem in problems)
    Statement.objects.update(status=StatementStatus.SENT, recipient="x@example.com", sent_at=PAID_AT)
    assert statements_sent(CheckWindow.ending(PAID_AT + timedelta(hours=2))) == []  # resolved once sent


def test_a_permanent_refusal_stops_the_statement_alerts_once_and_a_person_retries_it(
    admin_client: Any, admin_pages: None, paid: Any, smtp: RunningSmtpServer
) -> None:
    """A 550 is the mail server's final word: no retry fixes it, so the statement stops
    (as a transfer the provider refuses does), is alerted once and stays a problem until a
    person fixes the address and retries it, under the same Message-ID."""
    [restaurant] = paid(1)
    statement = only_one_unsent()
    clock = Clock(PAID_AT)
    smtp.fail_next("550")
    assert send_pass(clock) == {"attached": 0, "stopped": 1}
    statement.refresh_from_db()
    assert (statement.status, statement.next_attempt_at) == (StatementStatus.STOPPED, None)
    assert "SMTPDataError" in statement.last_error and "550" in statement.last_error
    [alert] = RunAlert.objects.filter(job_name=SEND_STATEMENTS_JOB)
    assert alert.subject == f"statement:{statement.message_id}"
    # A problem at once (not after the unsent grace), the one alerted: never re-alerted.
    [problem] = statements_sent(CheckWindow.ending(clock.at))
    assert problem.subject == alert.subject and "550" in problem.detail
    clock.advance(days=3)
    assert send_pass(clock) == {"attached": 0}  # never mailed again by a pass
    assert copies(smtp) == Counter() and RunAlert.objects.count() == 1
    # A person fixes the address and retries it from the admin: mailed once, same id.
    Restaurant.objects.filter(id=restaurant.id).update(statement_email="fixed@example.com")
    data = {"action": "retry", "index": 0, ACTION_CHECKBOX_NAME: [statement.pk]}
    response = admin_client.post(reverse("admin:statements_statement_changelist"), data, follow=True)
    assert "1 statements will be mailed again." in response.content.decode()
    assert send_pass(clock) == {"attached": 0, "sent": 1}
    assert copies(smtp) == Counter({statement.message_id: 1})
    assert [message["To"] for message in smtp.messages()] == ["fixed@example.com"]
    assert statements_sent(CheckWindow.ending(clock.at)) == []


def test_a_statement_that_is_not_stopped_is_not_retried(paid: Any) -> None:
    paid(1)
    statement = Statement.objects.first()
    assert statement is not None
    with pytest.raises(StatementError, match="is pending, not stopped"):
        statement_retry(statement_id=statement.id, now=PAID_AT)
