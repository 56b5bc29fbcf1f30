"""Writes for carts and their items.

Every change to a cart or its items also sets ``Cart.updated_at`` in the same transaction:
the nightly clean-up deletes carts by that column, so a change that forgot it would let a
cart in use look abandoned. The touch is the first statement of each change, so on
PostgreSQL its row lock also serialises concurrent changes to one cart.

``updated_at`` never moves backwards: servers' clocks disagree by a little, and a change
stamped by a slow clock must not make a cart look older than it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from carts import sql
from carts.errors import CartItemNotFoundError, CartNotFoundError
from carts.models import Cart, CartItem
from tiffin.validators import require_aware

_SKU_MAX = CartItem._meta.get_field("sku").max_length or 64
_CUSTOMER_REF_MAX = Cart._meta.get_field("customer_ref").max_length or 64


def cart_create(*, customer_ref: str, now: datetime) -> Cart:
    require_aware(now, "now")
    if not customer_ref or len(customer_ref) > _CUSTOMER_REF_MAX:
        raise ValidationError({"customer_ref": f"customer_ref must be 1 to {_CUSTOMER_REF_MAX} characters"})
    return Cart.objects.create(customer_ref=customer_ref, created_at=now, updated_at=now)


def cart_touch(*, cart_id: int, now: datetime) -> None:
    """Record activity on the cart at ``now`` (never earlier than what is stored)."""
    require_aware(now, "now")
    changed = Cart.objects.filter(pk=cart_id).update(updated_at=Greatest(F("updated_at"), Value(now)))
    if changed != 1:
        raise CartNotFoundError(cart_id)


def cart_add_item(*, cart_id: int, sku: str, quantity: int, unit_price: Decimal, now: datetime) -> CartItem:
    """Add ``quantity`` of ``sku``. A cart holds one line per SKU: adding a SKU it already
    holds adds to that line's quantity and takes the new unit price (the price shown now)."""
    _check_item(sku=sku, quantity=quantity, unit_price=unit_price)
    with transaction.atomic():
        cart_touch(cart_id=cart_id, now=now)
        item = CartItem.objects.filter(cart_id=cart_id, sku=sku).first()
        if item is None:
            return CartItem.objects.create(cart_id=cart_id, sku=sku, quantity=quantity, unit_price=unit_price)
        CartItem.objects.filter(pk=item.pk).update(quantity=F("quantity") + quantity, unit_price=unit_price)
        item.refresh_from_db()
        return item


def cart_remove_item(*, cart_id: int, sku: str, now: datetime, quantity: int | None = None) -> None:
    """Remove ``quantity`` of ``sku`` from the cart, or the whole line when ``quantity`` is
    None or at least what the line holds."""
    if quantity is not None and quantity < 1:
        raise ValidationError({"quantity": f"quantity {quantity} must be at least 1"})
    with transaction.atomic():
        cart_touch(cart_id=cart_id, now=now)
        item = CartItem.objects.filter(cart_id=cart_id, sku=sku).first()
        if item is None:
            raise CartItemNotFoundError(cart_id=cart_id, sku=sku)
        if quantity is None or quantity >= item.quantity:
            item.delete()
        else:
            CartItem.objects.filter(pk=item.pk).update(quantity=F("quantity") - quantity)


def _check_item(*, sku: str, quantity: int, unit_price: Decimal) -> None:
    errors: dict[str, str] = {}
    if not sku or len(sku) > _SKU_MAX:
        errors["sku"] = f"sku must be 1 to {_SKU_MAX} characters"
    if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 1:
        errors["quantity"] = f"quantity {quantity!r} must be a whole number of at least 1"
    if not isinstance(unit_price, Decimal) or not unit_price.is_finite() or unit_price < 0:
        errors["unit_price"] = f"unit price {unit_price!r} must be a Decimal of at least 0"
    elif unit_price != unit_price.quantize(Decimal("0.01")):
        # Refused, not rounded: the price stored is the price the customer was shown.
        errors["unit_price"] = f"unit price {unit_price} has fractions of a cent"
    if errors:
        raise ValidationError(errors)


# --- The nightly clean-up ----------------------------------------------------------------


@dataclass(frozen=True)
class CartCleanup:
    carts: int
    items: int
    batches: int


def carts_delete_stale(
    *, cutoff: datetime, batch_size: int, on_batch: Callable[[CartCleanup], None] | None = None
) -> CartCleanup:
    """Delete carts (and their items) untouched since before ``cutoff``, in batches of
    one short transaction each, so no writer waits for more than one batch:

    1. Pick the next ``batch_size`` stale carts in id order after the previous batch's
       last, FOR UPDATE SKIP LOCKED on PostgreSQL (a cart being changed is skipped).
    2. Delete those carts still untouched (``updated_at < cutoff`` re-checked), then the
       items of the carts deleted: a touch committed before the pick keeps its cart; one
       after it waits, then finds the cart gone.
    3. Stop at a short batch.

    Id order, not oldest first: carts sit on disk about in id order, so a batch touches
    a few adjacent pages instead of the whole table. The
    pass never goes back: a cart skipped while locked waits for the next night. One batch
    is one statement on PostgreSQL (``carts.sql``).
    """
    total = CartCleanup(carts=0, items=0, batches=0)
    after_id = 0
    while True:
        batch = _delete_stale_batch(cutoff=cutoff, batch_size=batch_size, after_id=after_id)
        if batch.last_id is None:
            return total
        after_id = batch.last_id
        total = CartCleanup(carts=total.carts + batch.carts, items=total.items + batch.items, batches=total.batches + 1)
        if on_batch is not None:
            on_batch(total)
        if batch.picked < batch_size:
            return total


def _delete_stale_batch(*, cutoff: datetime, batch_size: int, after_id: int) -> sql.StaleBatch:
    """One batch in one transaction."""
    with transaction.atomic():
        return sql.stale_batch_delete(cutoff=cutoff, after_id=after_id, batch_size=batch_size)
