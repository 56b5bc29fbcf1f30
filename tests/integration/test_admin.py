"""The admin pages render over real data, payouts cannot be touched by anyone, and the
order actions go through the services (so they refuse what the services refuse)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.urls import reverse

from carts.models import Cart
from carts.services import cart_add_item, cart_create
from orders.models import Order, OrderStatus
from payouts.models import Payout
from tests.admin_pages import ADMIN_PAGES
from tests.integration.test_payout_constraints import payout

pytestmark = ADMIN_PAGES


@pytest.fixture
def seeded(db):
    call_command("seed_demo", "--restaurants", "3", "--weeks", "1", "--now", "2026-03-02T12:00:00Z", stdout=StringIO())


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "query"),
    [
        ("admin:orders_restaurant_changelist", "?q=Dosa"),
        ("admin:orders_order_changelist", "?status__exact=delivered&q=cust"),
        ("admin:orders_order_changelist", "?q=12"),
        ("admin:orders_order_changelist", "?placed_at__year=2026&placed_at__month=3"),
        ("admin:carts_cart_changelist", "?freshness=stale"),
        ("admin:carts_cart_changelist", "?freshness=fresh&q=cust"),
        ("admin:payouts_payout_changelist", "?restaurant__timezone=Asia/Kolkata"),
    ],
)
def test_the_change_lists_render_with_filters_and_search(admin_client, seeded, name, query):
    response = admin_client.get(reverse(name) + query)
    assert response.status_code == 200


@pytest.mark.django_db
def test_the_freshness_filter_splits_carts_at_the_stale_cutoff(admin_client, seeded):
    url = reverse("admin:carts_cart_changelist")
    with time_machine.travel("2026-03-02T12:00:00Z", tick=False):
        stale = admin_client.get(url + "?freshness=stale").context["cl"].result_count
        fresh = admin_client.get(url + "?freshness=fresh").context["cl"].result_count
    assert stale + fresh == Cart.objects.count()
    assert stale == Cart.objects.filter(updated_at__lt="2026-02-23T12:00:00Z").count() > 0


@pytest.mark.django_db
def test_a_cart_page_shows_its_items_read_only(admin_client, seeded):
    cart = Cart.objects.filter(items__isnull=False).first()
    assert cart is not None
    response = admin_client.get(reverse("admin:carts_cart_change", args=[cart.pk]))
    assert response.status_code == 200
    assert all(sku in response.content.decode() for sku in cart.items.values_list("sku", flat=True))
    assert response.context["has_change_permission"] is False


@pytest.mark.django_db
def test_a_cart_pages_line_total_prints_money_as_the_commands_do(admin_client):
    now = datetime(2026, 3, 2, 12, tzinfo=UTC)
    cart = cart_create(customer_ref="cust-catering", now=now)
    cart_add_item(cart_id=cart.pk, sku="thali-platter", quantity=12, unit_price=Decimal("123.45"), now=now)
    page = admin_client.get(reverse("admin:carts_cart_change", args=[cart.pk])).content.decode()
    assert re.search(r'field-line_total">\s*<p>1,481.40</p>', page)


@pytest.mark.django_db
def test_not_even_a_superuser_can_add_change_or_delete_a_payout(admin_client, restaurant):
    stored = payout(restaurant)
    stored.save()
    assert admin_client.get(reverse("admin:payouts_payout_add")).status_code == 403
    assert (
        admin_client.post(reverse("admin:payouts_payout_delete", args=[stored.pk]), {"post": "yes"}).status_code == 403
    )
    change_url = reverse("admin:payouts_payout_change", args=[stored.pk])
    assert admin_client.get(change_url).status_code == 200  # viewing is allowed
    admin_client.post(change_url, {"net": "0.00", "gross": "0.00", "commission": "0.00"})
    assert Payout.objects.get().net == stored.net
    # Without delete permission the bulk delete action is gone; only the CSV export is left.
    action_form = admin_client.get(reverse("admin:payouts_payout_changelist")).context["action_form"]
    assert [name for name, _ in action_form.fields["action"].choices if name] == ["export_csv"]


@pytest.mark.django_db
def test_orders_cannot_be_added_or_edited_in_a_form(admin_client, order_factory):
    order = order_factory()
    assert admin_client.get(reverse("admin:orders_order_add")).status_code == 403
    admin_client.post(reverse("admin:orders_order_change", args=[order.pk]), {"status": "delivered"})
    assert Order.objects.get().status == OrderStatus.PLACED


def run_action(client: Any, action: str, orders: list[Order]) -> list[str]:
    response = client.post(
        reverse("admin:orders_order_changelist"),
        {"action": action, "_selected_action": [order.pk for order in orders]},
        follow=True,
    )
    return [str(message) for message in response.context["messages"]]


@pytest.mark.django_db
def test_the_accept_action_accepts_placed_orders_and_reports_the_refusals(admin_client, order_factory, clocks):
    placed, delivered = order_factory(), order_factory(OrderStatus.DELIVERED)
    clocks(placed.placed_at + timedelta(minutes=1))  # the admin's clock and the database's: in time
    messages = run_action(admin_client, "accept_orders", [placed, delivered])
    assert Order.objects.get(pk=placed.pk).status == OrderStatus.ACCEPTED
    assert Order.objects.get(pk=delivered.pk).status == OrderStatus.DELIVERED
    assert "1 order(s) accepted." in messages
    assert f"Refused: order {delivered.pk} is delivered; only a placed order can be accepted." in messages


@pytest.mark.django_db
def test_the_cancel_action_records_who_cancelled(admin_client, admin_user, order_factory):
    order = order_factory()
    run_action(admin_client, "cancel_orders", [order])
    stored = Order.objects.get(pk=order.pk)
    assert (stored.status, stored.cancel_reason) == (
        OrderStatus.CANCELLED,
        f"cancelled in the admin by {admin_user.username}",
    )


@pytest.mark.django_db
def test_a_user_who_may_only_view_orders_gets_no_transition_actions(client, django_user_model, order_factory):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_order"))
    client.force_login(viewer)
    order_factory()
    response = client.get(reverse("admin:orders_order_changelist"))
    assert response.status_code == 200
    assert response.context["action_form"] is None
