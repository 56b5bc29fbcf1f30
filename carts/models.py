from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import Q

# The job of this app (carts/jobs.py); reads and writes both name it.
CLEAN_CARTS_JOB = "clean-carts"


class Cart(models.Model):
    customer_ref = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    # Touched by every change to the cart or its items (carts.services).
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [
            # Nightly clean-up: carts WHERE updated_at < cutoff, taken in id batches.
            models.Index(fields=["updated_at", "id"], name="cart_updated_at"),
        ]

    def __str__(self) -> str:
        return f"Cart {self.pk} of {self.customer_ref}"


class CartItem(models.Model):
    # The clean-up deletes carts; their items go with them, in the same transaction.
    cart = models.ForeignKey(Cart, on_delete=models.CASCADE, related_name="items", db_index=True)
    sku = models.CharField(max_length=64)
    quantity = models.PositiveIntegerField()
    unit_price = models.DecimalField(max_digits=10, decimal_places=2)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0), name="cart_item_quantity_positive"),
            models.CheckConstraint(condition=Q(unit_price__gte=Decimal("0")), name="cart_item_price_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku}"
