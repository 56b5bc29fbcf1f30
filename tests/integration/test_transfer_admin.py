"""Transfers in the admin: each payout's transfer on its page, the payouts filtered by
their transfer's status, the outbox list by status, and retrying a stopped transfer with
the same key only for those allowed to."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from orders.models import OrderStatus, Restaurant
from payouts.models import Payout
from tests.admin_pages import ADMIN_PAGES
from tests.engine import pay
from transfers.models import Transfer, TransferStatus

pytestmark = ADMIN_PAGES

AS_OF = datetime(2027, 3, 21, 20, 30, tzinfo=UTC)
TRANSFERS = "admin:transfers_transfer_changelist"


@pytest.fixture
def stopped(restaurant_factory: Any, order_factory: Any) -> Transfer:
    """A restaurant paid for two weeks (one with orders); its transfer stopped."""
    restaurant = restaurant_factory(onboarded_at=datetime(2027, 3, 8, tzinfo=UTC))
    Restaurant.objects.filter(id=restaurant.id).update(provider_account="acct_Admin1")
    placed_at = datetime(2027, 3, 10, 12, tzinfo=UTC)
    order_factory(OrderStatus.DELIVERED, restaurant=restaurant, total=Decimal("250.00"), placed_at=placed_at)
    pay(AS_OF)
    transfer = Transfer.objects.get()
    Transfer.objects.filter(id=transfer.id).update(
        status=TransferStatus.STOPPED, next_attempt_at=None, attempts=2, last_error="IdempotencyError (400): keys"
    )
    transfer.refresh_from_db()
    return transfer


def retry(client: Client, transfer: Transfer) -> Any:
    data = {"action": "retry", "index": 0, ACTION_CHECKBOX_NAME: [transfer.pk]}
    return client.post(reverse(TRANSFERS), data, follow=True)


@pytest.mark.django_db
def test_a_payout_page_shows_its_transfer_and_payouts_filter_by_it(admin_client, stopped) -> None:
    page = admin_client.get(reverse("admin:payouts_payout_change", args=[stopped.payout_id]))
    assert page.status_code == 200
    text = page.content.decode()
    assert stopped.idempotency_key in text and "Stopped (needs a person)" in text
    assert "2 attempts" in text and "IdempotencyError (400): keys" in text
    listed = admin_client.get(reverse("admin:payouts_payout_changelist") + "?transfer=stopped")
    assert {p.pk for p in listed.context["cl"].queryset} == {stopped.payout_id}
    nothing = admin_client.get(reverse("admin:payouts_payout_changelist") + "?transfer=none")
    assert (
        {p.pk for p in nothing.context["cl"].queryset}
        == set(Payout.objects.filter(net=0).values_list("pk", flat=True))
        != set()
    )


@pytest.mark.django_db
def test_the_outbox_list_filters_by_status(admin_client, stopped) -> None:
    stopped_list = admin_client.get(reverse(TRANSFERS) + "?status__exact=stopped")
    assert [t.pk for t in stopped_list.context["cl"].queryset] == [stopped.pk]
    assert list(admin_client.get(reverse(TRANSFERS) + "?status__exact=sent").context["cl"].queryset) == []


@pytest.mark.django_db
def test_staff_without_the_permission_cannot_retry(stopped) -> None:
    user = User.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_transfer"))
    client = Client()
    client.force_login(user)
    page = client.get(reverse(TRANSFERS))
    assert page.status_code == 200
    assert page.context["action_form"] is None  # the retry action is the only one; not offered
    retry(client, stopped)
    stopped.refresh_from_db()
    assert stopped.status == TransferStatus.STOPPED


@pytest.mark.django_db
def test_retrying_keeps_the_key_and_the_frozen_request(stopped) -> None:
    user = User.objects.create_user("treasurer", password="x", is_staff=True)
    for codename in ("view_transfer", "retry_transfer"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    before = (stopped.idempotency_key, stopped.amount_minor, stopped.destination, stopped.attempts)
    response = retry(client, stopped)
    assert "1 transfers will be sent again" in response.content.decode()
    stopped.refresh_from_db()
    assert stopped.status == TransferStatus.PENDING and stopped.next_attempt_at is not None
    assert (stopped.idempotency_key, stopped.amount_minor, stopped.destination, stopped.attempts) == before
    # A transfer that is not stopped is not retried again.
    due = stopped.next_attempt_at
    response = retry(client, stopped)
    assert "not stopped" in response.content.decode()
    stopped.refresh_from_db()
    assert stopped.next_attempt_at == due


@pytest.mark.django_db
def test_a_restaurants_provider_account_is_validated_in_the_admin(admin_client, restaurant) -> None:
    change = reverse("admin:orders_restaurant_change", args=[restaurant.pk])
    data = {
        "name": restaurant.name,
        "timezone": restaurant.timezone,
        "onboarded_at_0": f"{restaurant.onboarded_at:%Y-%m-%d}",
        "onboarded_at_1": f"{restaurant.onboarded_at:%H:%M:%S}",
        "rate_changes-TOTAL_FORMS": "0",
        "rate_changes-INITIAL_FORMS": "0",
    }
    refused = admin_client.post(change, {**data, "provider_account": "acct 42; drop"})
    assert refused.status_code == 200 and "is &#x27;acct_&#x27; followed by" in refused.content.decode()
    restaurant.refresh_from_db()
    assert restaurant.provider_account == ""
    assert admin_client.post(change, {**data, "provider_account": "acct_Good1"}).status_code == 302
    restaurant.refresh_from_db()
    assert restaurant.provider_account == "acct_Good1"
