"""Admin for restaurants and orders.

Orders are read-only here: a form save writes every column from the row it loaded, so it
could undo a transition that committed meanwhile (a lost update). Status changes go
through the admin actions, which call the same services as everything else and so get
the same conditional update and the same refusals.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from orders.errors import OrderError
from orders.models import Order, Restaurant
from orders.services import order_accept, order_cancel, order_deliver, order_reject
from tiffin import clock
from tiffin.admin_lists import BoundedPaginator

if TYPE_CHECKING:
    _RestaurantAdmin = admin.ModelAdmin[Restaurant]
    _OrderAdmin = admin.ModelAdmin[Order]
else:  # ModelAdmin is generic only in django-stubs
    _RestaurantAdmin = _OrderAdmin = admin.ModelAdmin

_OrderService = Callable[..., Order]
# Refusals listed one by one up to this many; beyond it, only their number.
_REFUSALS_SHOWN = 10


@admin.register(Restaurant)
class RestaurantAdmin(_RestaurantAdmin):
    list_display = ("name", "timezone", "commission_percent", "onboarded_at", "is_active")
    list_filter = ("timezone", "is_active")
    search_fields = ("name",)
    date_hierarchy = "onboarded_at"

    @admin.display(description="commission", ordering="commission_rate")
    def commission_percent(self, restaurant: Restaurant) -> str:
        return f"{restaurant.commission_rate * 100:.2f} %"

    def get_readonly_fields(self, request: HttpRequest, obj: Restaurant | None = None) -> tuple[str, ...]:
        # Business weeks are cut in the restaurant's zone from its onboarding week: once a
        # week is paid, moving either would cut new weeks across paid hours.
        if obj is not None and obj.payouts.exists():
            return ("timezone", "onboarded_at")
        return ()


@admin.register(Order)
class OrderAdmin(_OrderAdmin):
    list_display = ("id", "restaurant", "customer_ref", "status", "total", "placed_at", "delivered_at")
    list_filter = ("status", "restaurant__timezone")
    list_select_related = ("restaurant",)
    search_fields = ("=id", "customer_ref", "restaurant__name")
    # The order table is the largest one. Newest first by id (ids follow placement): the
    # primary key serves it, where -placed_at has no index and would sort the whole table;
    # for the same reason there is no date drill-down (MIN/MAX and every day's filter on
    # placed_at would scan the table). Counted up to a limit, never a second COUNT(*).
    ordering = ("-id",)
    paginator = BoundedPaginator
    show_full_result_count = False
    actions = ("accept_orders", "reject_orders", "deliver_orders", "cancel_orders")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # orders are placed through orders.services.order_place

    def has_change_permission(self, request: HttpRequest, obj: Order | None = None) -> bool:
        return False  # see the module docstring: no form saves over a transition

    def has_transition_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("orders.change_order")

    @admin.action(description="Accept the selected placed orders", permissions=["transition"])
    def accept_orders(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        self._apply(request, queryset, order_accept, "accepted")

    @admin.action(description="Reject the selected placed orders", permissions=["transition"])
    def reject_orders(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        self._apply(request, queryset, order_reject, "rejected")

    @admin.action(description="Mark the selected accepted orders delivered", permissions=["transition"])
    def deliver_orders(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        self._apply(request, queryset, order_deliver, "delivered")

    @admin.action(description="Cancel the selected placed orders", permissions=["transition"])
    def cancel_orders(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        reason = f"cancelled in the admin by {request.user.get_username()}"

        def cancel(*, order_id: int, now: datetime) -> Order:
            return order_cancel(order_id=order_id, now=now, reason=reason)

        self._apply(request, queryset, cancel, "cancelled")

    def _apply(self, request: HttpRequest, queryset: QuerySet[Order], service: _OrderService, verb: str) -> None:
        now = clock.now()  # one reading for the whole action, as for any operation
        done, refusals = 0, []
        for order_id in queryset.values_list("pk", flat=True):
            try:
                service(order_id=order_id, now=now)
            except OrderError as error:
                refusals.append(str(error))
            else:
                done += 1
        if done:
            self.message_user(request, f"{done} order(s) {verb}.", messages.SUCCESS)
        for refusal in refusals[:_REFUSALS_SHOWN]:
            self.message_user(request, f"Refused: {refusal}.", messages.WARNING)
        if len(refusals) > _REFUSALS_SHOWN:
            more = len(refusals) - _REFUSALS_SHOWN
            self.message_user(request, f"{more} more order(s) refused.", messages.WARNING)
