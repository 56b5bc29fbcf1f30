"""Every change to a cart or its items moves ``Cart.updated_at`` in the same transaction
(the clean-up deletes by it), never backwards, and a refused change moves nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from carts import services
from carts.errors import CartItemNotFoundError, CartNotFoundError
from carts.models import Cart, CartItem
from carts.selectors import cart_freshness

CREATED = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
LATER = CREATED + timedelta(hours=3)


def updated_at(cart_id: int) -> datetime:
    return Cart.objects.values_list("updated_at", flat=True).get(pk=cart_id)


def items(cart_id: int) -> list[tuple[str, int, Decimal]]:
    return list(CartItem.objects.filter(cart_id=cart_id).values_list("sku", "quantity", "unit_price"))


@pytest.fixture
def cart(db):
    return services.cart_create(customer_ref="cust-00007", now=CREATED)


@pytest.mark.django_db
def test_a_new_cart_is_created_and_updated_at_now(cart):
    assert (cart.created_at, updated_at(cart.pk)) == (CREATED, CREATED)


@pytest.mark.django_db
def test_adding_an_item_bumps_updated_at(cart):
    services.cart_add_item(cart_id=cart.pk, sku="masala-dosa", quantity=2, unit_price=Decimal("6.50"), now=LATER)
    assert updated_at(cart.pk) == LATER
    assert items(cart.pk) == [("masala-dosa", 2, Decimal("6.50"))]
    assert Cart.objects.get(pk=cart.pk).created_at == CREATED


@pytest.mark.django_db
def test_adding_a_sku_again_adds_to_its_line_at_the_new_price(cart):
    services.cart_add_item(cart_id=cart.pk, sku="naan", quantity=1, unit_price=Decimal("2.99"), now=CREATED)
    item = services.cart_add_item(cart_id=cart.pk, sku="naan", quantity=2, unit_price=Decimal("3.25"), now=LATER)
    assert (item.quantity, item.unit_price) == (3, Decimal("3.25"))
    assert items(cart.pk) == [("naan", 3, Decimal("3.25"))]
    assert updated_at(cart.pk) == LATER


@pytest.mark.django_db
def test_removing_part_of_a_line_and_then_the_rest_bumps_updated_at_each_time(cart):
    services.cart_add_item(cart_id=cart.pk, sku="lassi", quantity=3, unit_price=Decimal("3.99"), now=CREATED)
    services.cart_remove_item(cart_id=cart.pk, sku="lassi", quantity=1, now=LATER)
    assert (items(cart.pk), updated_at(cart.pk)) == ([("lassi", 2, Decimal("3.99"))], LATER)
    services.cart_remove_item(cart_id=cart.pk, sku="lassi", now=LATER + timedelta(minutes=5))
    assert (items(cart.pk), updated_at(cart.pk)) == ([], LATER + timedelta(minutes=5))


@pytest.mark.django_db
def test_touch_bumps_updated_at(cart):
    services.cart_touch(cart_id=cart.pk, now=LATER)
    assert updated_at(cart.pk) == LATER


@pytest.mark.django_db
def test_a_change_stamped_by_a_slower_clock_never_moves_updated_at_back(cart):
    services.cart_touch(cart_id=cart.pk, now=LATER)
    services.cart_add_item(
        cart_id=cart.pk, sku="bao", quantity=1, unit_price=Decimal("5.50"), now=LATER - timedelta(seconds=2)
    )
    services.cart_touch(cart_id=cart.pk, now=LATER - timedelta(days=1))
    assert updated_at(cart.pk) == LATER
    assert items(cart.pk) == [("bao", 1, Decimal("5.50"))]  # the change itself still happened


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("quantity", {"quantity": 0}),
        ("quantity", {"quantity": -1}),
        ("unit_price", {"unit_price": Decimal("-0.01")}),
        ("unit_price", {"unit_price": Decimal("1.005")}),
        ("unit_price", {"unit_price": 1.5}),
        ("sku", {"sku": ""}),
    ],
)
def test_a_bad_item_is_refused_and_the_cart_is_not_touched(cart, field, values):
    item = {"sku": "thali", "quantity": 1, "unit_price": Decimal("11.50"), **values}
    with pytest.raises(ValidationError) as refused:
        services.cart_add_item(cart_id=cart.pk, now=LATER, **item)
    assert field in refused.value.message_dict
    assert (items(cart.pk), updated_at(cart.pk)) == ([], CREATED)


@pytest.mark.django_db
def test_removing_a_sku_the_cart_lacks_is_refused_and_the_touch_rolled_back(cart):
    with pytest.raises(CartItemNotFoundError, match=f"cart {cart.pk} has no item 'pizza'"):
        services.cart_remove_item(cart_id=cart.pk, sku="pizza", now=LATER)
    assert updated_at(cart.pk) == CREATED


@pytest.mark.django_db
def test_adding_to_a_missing_cart_is_refused_and_writes_nothing():
    with pytest.raises(CartNotFoundError, match="cart 424242 does not exist"):
        services.cart_add_item(cart_id=424242, sku="x", quantity=1, unit_price=Decimal("1.00"), now=LATER)
    assert not CartItem.objects.exists()


@pytest.mark.django_db
def test_freshness_counts_a_cart_stale_only_once_it_is_older_than_the_cutoff(cart):
    stale_after = timedelta(days=7)
    assert cart_freshness(as_of=CREATED + stale_after, stale_after=stale_after).stale == 0  # exactly 7 days: fresh
    later = cart_freshness(as_of=CREATED + stale_after + timedelta(seconds=1), stale_after=stale_after)
    assert (later.fresh, later.stale) == (0, 1)
