"""Creating restaurants and placing orders: good input is stored as given, bad input is
refused with a message naming the field, and nothing is written."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from orders import services
from orders.errors import OrderError
from orders.models import CANCEL_STALE_ORDER_JOB, Order, OrderStatus, Restaurant
from scheduling.models import JobRun, RunStatus
from scheduling.services import run_schedule_delayed_with_subject, run_schedule_delayed_with_subject_fast
from scheduling.sql import SubjectInsert

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_it_creates_a_restaurant_with_its_zone_and_rate():
    restaurant = services.restaurant_create(
        name=" Dosa Darbar ", timezone="Asia/Kolkata", commission_rate=Decimal("0.1750"), onboarded_at=NOW
    )
    stored = Restaurant.objects.get(pk=restaurant.pk)
    assert (stored.name, stored.timezone, stored.commission_rate) == ("Dosa Darbar", "Asia/Kolkata", Decimal("0.175"))
    assert stored.onboarded_at == NOW


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"timezone": "Asia/Calcutta "}, "timezone", "is not a canonical IANA time zone"),
        ({"timezone": "IST"}, "timezone", "is not a canonical IANA time zone"),
        # Known to zoneinfo, but not a zone every server reads the same way: a link, the
        # server's own /etc/localtime, and names without an area.
        ({"timezone": "Asia/Calcutta"}, "timezone", "is not a canonical IANA time zone of tzdata"),
        ({"timezone": "localtime"}, "timezone", "is not a canonical IANA time zone"),
        ({"timezone": "posixrules"}, "timezone", "is not a canonical IANA time zone"),
        ({"timezone": "Factory"}, "timezone", "is not a canonical IANA time zone"),
        ({"timezone": "EST5EDT"}, "timezone", "is not a canonical IANA time zone"),
        ({"timezone": "EST"}, "timezone", "is not a canonical IANA time zone"),
        ({"commission_rate": Decimal("1")}, "commission_rate", "0 <= rate < 1"),
        ({"commission_rate": Decimal("-0.01")}, "commission_rate", "0 <= rate < 1"),
        ({"commission_rate": Decimal("15")}, "commission_rate", "0.15 is 15 %"),
        ({"commission_rate": Decimal("0.12345")}, "commission_rate", "more than 4 decimal places"),
        ({"commission_rate": Decimal("NaN")}, "commission_rate", "finite Decimal"),
        ({"commission_rate": 0.15}, "commission_rate", "finite Decimal"),
        ({"name": "  "}, "name", "needs a name"),
    ],
)
def test_it_refuses_a_restaurant_with_a_bad_field_and_writes_nothing(fields, field, message):
    values = {"name": "Harlem Grill", "timezone": "America/New_York", "commission_rate": Decimal("0.2")}
    with pytest.raises(ValidationError) as refused:
        services.restaurant_create(**{**values, **fields}, onboarded_at=NOW)
    assert message in " ".join(refused.value.message_dict[field])
    assert not Restaurant.objects.exists()


@pytest.mark.django_db
def test_a_rate_of_zero_is_allowed():
    restaurant = services.restaurant_create(
        name="Friends", timezone="Europe/London", commission_rate=Decimal("0"), onboarded_at=NOW
    )
    assert restaurant.commission_rate == 0


@pytest.mark.django_db
def test_it_places_an_order_at_now_with_the_exact_total(restaurant):
    order = services.order_place(restaurant=restaurant, customer_ref="cust-00042", total=Decimal("18.05"), now=NOW)
    stored = Order.objects.get(pk=order.pk)
    assert (stored.status, stored.placed_at, stored.total) == (OrderStatus.PLACED, NOW, Decimal("18.05"))
    assert stored.accepted_at is stored.rejected_at is stored.delivered_at is stored.cancelled_at is None


def _columns(instance):
    return {field.attname: getattr(instance, field.attname) for field in type(instance)._meta.concrete_fields}


@pytest.mark.django_db
def test_the_order_and_run_it_returns_are_the_rows_stored(restaurant):
    # Built from the values given, as Order.objects.create returns them, not read back.
    order = services.order_place(restaurant=restaurant, customer_ref="cust-7", total=Decimal("9.99"), now=NOW)
    run = JobRun.objects.get(subject=services.order_cancellation_subject(order_id=order.pk))
    assert _columns(order) == _columns(Order.objects.get(pk=order.pk))
    assert not order._state.adding and order._state.db == "default"
    assert run.status == RunStatus.SCHEDULED and run.due_at == services.order_accept_deadline(placed_at=NOW)


# A restaurant as a new subject with a delayed run of its own (any row with an id will do).
UDUPI = SubjectInsert(
    sql="INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
    "VALUES ('Udupi', 'UTC', 0.1, %s, true) RETURNING id",
    params=(NOW,),
    subject_prefix="restaurant:",
)


@pytest.mark.django_db
def test_the_run_a_new_subject_claims_is_returned_as_stored():
    row, run = run_schedule_delayed_with_subject(
        job_name=CANCEL_STALE_ORDER_JOB, subject=UDUPI, scheduled_for=NOW, now=NOW
    )
    assert run is not None
    assert _columns(run) == _columns(JobRun.objects.get(pk=run.pk))
    assert run.subject == f"restaurant:{row[0]}"


@pytest.mark.django_db
def test_the_fast_path_returns_the_stored_runs_id_and_logs_its_claim_as_the_plain_one(caplog):
    with caplog.at_level("INFO", logger="scheduling.runs"):
        row, run_id = run_schedule_delayed_with_subject_fast(
            job_name=CANCEL_STALE_ORDER_JOB, subject=UDUPI, scheduled_for=NOW, now=NOW
        )
    assert run_id is not None
    run = JobRun.objects.get(pk=run_id)
    assert (run.subject, run.status) == (f"restaurant:{row[0]}", RunStatus.SCHEDULED)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "scheduling.runs"]
    assert [(line["event"], line["run"], line["subject"]) for line in lines] == [("claimed", run_id, run.subject)]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("total", "message"),
    [
        (Decimal("0"), "must be more than 0"),
        (Decimal("-5.00"), "must be more than 0"),
        (Decimal("8.505"), "fractions of a cent"),
        (Decimal("Infinity"), "finite Decimal"),
        (12.5, "finite Decimal"),
        (Decimal("10000000000"), "too large"),
    ],
)
def test_it_refuses_a_total_that_is_not_a_positive_amount_of_cents(restaurant, total, message):
    with pytest.raises(ValidationError) as refused:
        services.order_place(restaurant=restaurant, customer_ref="cust-00042", total=total, now=NOW)
    assert message in refused.value.message_dict["total"][0]
    assert not Order.objects.exists()


@pytest.mark.django_db
def test_it_refuses_an_order_for_an_inactive_restaurant(restaurant):
    restaurant = services.restaurant_deactivate(restaurant_id=restaurant.pk, now=NOW)
    with pytest.raises(OrderError, match="is not taking orders"):
        services.order_place(restaurant=restaurant, customer_ref="cust-00042", total=Decimal("9.99"), now=NOW)
    assert not Order.objects.exists()


@pytest.mark.django_db
def test_it_refuses_a_naive_placed_at(restaurant):
    with pytest.raises(ValueError, match="aware"):
        services.order_place(
            restaurant=restaurant, customer_ref="c", total=Decimal("9.99"), now=NOW.replace(tzinfo=None)
        )
    assert not Order.objects.exists()
