"""The errors a caller can cause through the cart services, each with its own message."""

from __future__ import annotations


class CartError(Exception):
    """Base of the errors a caller can cause through the cart services."""


class CartNotFoundError(CartError, LookupError):
    def __init__(self, cart_id: int) -> None:
        self.cart_id = cart_id
        super().__init__(f"cart {cart_id} does not exist")


class CartItemNotFoundError(CartError, LookupError):
    def __init__(self, *, cart_id: int, sku: str) -> None:
        self.cart_id = cart_id
        self.sku = sku
        super().__init__(f"cart {cart_id} has no item {sku!r}")
