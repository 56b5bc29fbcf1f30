"""Admin for carts: for looking, and deleting. Carts change only through carts.services,
which also touches ``updated_at``; a form edit would not, so none is offered."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest

from carts.models import Cart, CartItem
from carts.selectors import cart_stale_cutoff
from tiffin import clock
from tiffin.admin_lists import BoundedPaginator
from tiffin.money import money_text

if TYPE_CHECKING:
    _CartAdmin = admin.ModelAdmin[Cart]
    _CartItemInline = admin.TabularInline[CartItem, Cart]
else:  # ModelAdmin and the inlines are generic only in django-stubs
    _CartAdmin = admin.ModelAdmin
    _CartItemInline = admin.TabularInline


class FreshnessFilter(admin.SimpleListFilter):
    """Fresh or stale (what the nightly clean-up would delete), as of the request."""

    title = "freshness"
    parameter_name = "freshness"

    def lookups(self, request: HttpRequest, model_admin: object) -> list[tuple[str, str]]:
        days = settings.CART_STALE_DAYS  # read per request, not frozen at import
        return [("fresh", f"touched in the last {days} days"), ("stale", f"untouched for over {days} days")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Cart]) -> QuerySet[Cart] | None:
        if self.value() not in {"fresh", "stale"}:
            return queryset
        cutoff = cart_stale_cutoff(as_of=clock.now(), stale_after=timedelta(days=settings.CART_STALE_DAYS))
        if self.value() == "stale":
            return queryset.filter(updated_at__lt=cutoff)
        return queryset.filter(updated_at__gte=cutoff)


class CartItemInline(_CartItemInline):
    model = CartItem
    fields = ("sku", "quantity", "unit_price", "line_total")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Cart | None = None) -> bool:
        return False

    @admin.display(description="line total")
    def line_total(self, item: CartItem) -> str:
        return money_text(item.quantity * item.unit_price)  # exact: an integer times a 2-place Decimal


@admin.register(Cart)
class CartAdmin(_CartAdmin):
    list_display = ("id", "customer_ref", "item_count", "created_at", "updated_at")
    list_filter = (FreshnessFilter,)
    search_fields = ("=id", "customer_ref")
    # The drill-down offers calendar days (carts/.../change_list.html); updated_at's index
    # serves its MIN/MAX, the default ordering and each day's range.
    date_hierarchy = "updated_at"
    paginator = BoundedPaginator
    show_full_result_count = False
    inlines = (CartItemInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Cart]:
        # A correlated subquery per listed cart (carts_cartitem's cart_id index), not a
        # JOIN and GROUP BY over every cart the filters select: with a LIMIT, PostgreSQL
        # and SQLite evaluate it for the page's rows only. For that reason the column is
        # not sortable: ordering by it would count the items of every cart.
        items = CartItem.objects.filter(cart=OuterRef("pk")).order_by().values("cart").annotate(n=Count("*"))
        counted = Coalesce(Subquery(items.values("n"), output_field=IntegerField()), 0)
        return super().get_queryset(request).annotate(item_count=counted)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Cart | None = None) -> bool:
        return False

    @admin.display(description="items")
    def item_count(self, cart: Cart) -> int:
        return int(getattr(cart, "item_count", 0))
