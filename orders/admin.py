"""Admin for restaurants and orders.

Orders are read-only here: a form save writes every column from the row it loaded, so it
could undo a transition that committed meanwhile (a lost update). Status changes go
through the admin actions, which call the same services as everything else and so get
the same conditional update and the same refusals.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from orders.errors import OrderError
from orders.models import CommissionRateChange, Order, Restaurant
from orders.selectors import restaurant_paid_through
from orders.services import (
    order_accept,
    order_cancel,
    order_deliver,
    order_reject,
    rate_change_errors,
    restaurant_deactivate,
    restaurant_onboarding_errors,
    restaurant_rate_change,
    restaurant_reactivate,
)
from tiffin import clock
from tiffin.admin_lists import BoundedPaginator
from tiffin.money import money_text

if TYPE_CHECKING:
    _RestaurantAdmin = admin.ModelAdmin[Restaurant]
    _OrderAdmin = admin.ModelAdmin[Order]
    _RateChangeForm = forms.ModelForm[CommissionRateChange]
    _RestaurantForm = forms.ModelForm[Restaurant]
    _RateChangeInline = admin.TabularInline[CommissionRateChange, Restaurant]
else:  # ModelAdmin, ModelForm and TabularInline are generic only in django-stubs
    _RestaurantAdmin = _OrderAdmin = admin.ModelAdmin
    _RateChangeForm = _RestaurantForm = forms.ModelForm
    _RateChangeInline = admin.TabularInline

_OrderService = Callable[..., Order]
# Refusals listed one by one up to this many; beyond it, only their number.
_REFUSALS_SHOWN = 10


class RateChangeForm(_RateChangeForm):
    """A new rate change, validated by the same rules as the service (now or later, never
    into a paid period); existing rows are history and read-only."""

    class Meta:
        model = CommissionRateChange
        fields = ("rate", "effective_from")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # The inline formset has set the restaurant on the instance already.
        if self.instance.pk is None and {"rate", "effective_from"} <= data.keys():
            errors = rate_change_errors(
                restaurant=self.instance.restaurant,
                rate=data["rate"],
                effective_from=data["effective_from"],
                now=clock.now(),
            )
            for field, message in errors.items():
                self.add_error(field, message)
        return data


class RestaurantForm(_RestaurantForm):
    """The restaurant's fields; its onboarding is checked by the service's rules (in
    range, not past an order, fixed once paid), so the ledger never starts after an order."""

    class Meta:
        model = Restaurant
        fields = "__all__"

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "onboarded_at" in data and "onboarded_at" in self.fields:
            restaurant = self.instance if self.instance.pk is not None else None
            errors = restaurant_onboarding_errors(
                restaurant=restaurant, onboarded_at=data["onboarded_at"], now=clock.now()
            )
            for field, message in errors.items():
                self.add_error(field, message)
        return data


class RateChangeInline(_RateChangeInline):
    model = CommissionRateChange
    form = RateChangeForm
    extra = 0
    can_delete = False
    fields = ("rate", "effective_from", "created_at")
    readonly_fields = ("created_at",)
    verbose_name = "commission rate change"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # history: a change is a new row


@admin.register(Restaurant)
class RestaurantAdmin(_RestaurantAdmin):
    list_display = ("name", "timezone", "commission_percent", "onboarded_at", "is_active", "provider_account")
    list_filter = ("timezone", "is_active")
    search_fields = ("name", "=provider_account")
    date_hierarchy = "onboarded_at"
    form = RestaurantForm
    inlines = (RateChangeInline,)
    actions = ("deactivate", "reactivate")

    @admin.display(description="onboarding commission", ordering="commission_rate")
    def commission_percent(self, restaurant: Restaurant) -> str:
        return f"{restaurant.commission_rate * 100:.2f} %"

    @admin.display(description="paid through")
    def paid_through(self, restaurant: Restaurant) -> str:
        end = restaurant_paid_through(restaurant_id=restaurant.pk)
        return "never paid" if end is None else f"{end:%Y-%m-%d %H:%M} UTC"

    @admin.display(description="delivered orders waiting for their payout")
    def orders_waiting(self, restaurant: Restaurant) -> str:
        from payouts.selectors import payout_orders_waiting  # payouts depends on orders, not back

        waiting = payout_orders_waiting(restaurant_ids=[restaurant.pk])
        return "none" if not waiting else f"{waiting[0].order_count} orders, gross {money_text(waiting[0].gross)}"

    def get_readonly_fields(self, request: HttpRequest, obj: Restaurant | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        # The onboarding rate is history (changes are rate changes below); activity changes
        # through the actions, which stamp the deactivation. The zone may change: payouts
        # continue from the last one's end, and only future boundaries move. The onboarding
        # instant decides where the ledger starts, so it is fixed once anything is paid.
        fixed = ("commission_rate", "is_active", "deactivated_at", "paid_through", "orders_waiting")
        return (*fixed, "onboarded_at") if obj.payouts.exists() else fixed

    @admin.action(description="Deactivate: stop orders (finished weeks are still paid)")
    def deactivate(self, request: HttpRequest, queryset: QuerySet[Restaurant]) -> None:
        now = clock.now()
        _apply_each(
            self,
            request,
            queryset,
            lambda rid: restaurant_deactivate(restaurant_id=rid, now=now),
            noun="restaurant",
            verb="deactivated",
        )

    @admin.action(description="Reactivate: take orders again")
    def reactivate(self, request: HttpRequest, queryset: QuerySet[Restaurant]) -> None:
        _apply_each(
            self,
            request,
            queryset,
            lambda rid: restaurant_reactivate(restaurant_id=rid),
            noun="restaurant",
            verb="reactivated",
        )

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        # New rate changes go through the service (created_at, the same refusals), not
        # the inline's own save; save(commit=False) still records them for the history.
        for new in formset.save(commit=False):
            try:
                restaurant_rate_change(
                    restaurant_id=form.instance.pk, rate=new.rate, effective_from=new.effective_from, now=clock.now()
                )
            except ValidationError as error:
                raise _RateChangeRefusedError("; ".join(error.messages)) from error

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The form checked the service's rules a moment before the save, but the clock
        # moved since: a change "from now" may have become one in the past. The refusal
        # leaves the admin's transaction, which rolls back the whole save, and the page
        # says why: nothing is half saved and nothing answers 500.
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _RateChangeRefusedError as refused:
            self.message_user(request, f"Nothing was saved: {refused}.", messages.ERROR)
            return HttpResponseRedirect(request.path)


class _RateChangeRefusedError(Exception):
    """The rate-change service refused at save time what the form accepted at clean time."""


@admin.register(Order)
class OrderAdmin(_OrderAdmin):
    list_display = ("id", "restaurant", "customer_ref", "status", "total", "placed_at", "delivered_at")
    list_filter = ("status", "restaurant__timezone")
    list_select_related = ("restaurant",)
    search_fields = ("=id", "customer_ref", "restaurant__name")
    # The order table is the largest one. Newest first (the model's -placed_at, -id) and
    # the drill-down by day (orders/.../change_list.html: calendar choices between the
    # MIN and MAX) are both served by the index order_placed_at (placed_at, id): the
    # first page reads it backwards and stops, a day is one range of it. Counted up to a
    # limit, never a second COUNT(*).
    date_hierarchy = "placed_at"
    paginator = BoundedPaginator
    show_full_result_count = False
    actions = ("accept_orders", "reject_orders", "deliver_orders", "cancel_orders")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # orders are placed through orders.services.order_place

    def has_change_permission(self, request: HttpRequest, obj: Order | None = None) -> bool:
        return False  # see the module docstring: no form saves over a transition

    def has_delete_permission(self, request: HttpRequest, obj: Order | None = None) -> bool:
        # An order is a fact the ledger is computed from: a paid one is immutable (the
        # database refuses it on PostgreSQL) and deleting an unpaid one would lower a
        # payout silently. Nobody deletes orders here, superusers included.
        return False

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
        _apply_each(self, request, queryset, lambda oid: service(order_id=oid, now=now), noun="order", verb=verb)


def _apply_each(
    model_admin: Any,
    request: HttpRequest,
    queryset: QuerySet[Any],
    change: Callable[[int], Any],
    *,
    noun: str,
    verb: str,
) -> None:
    """An admin action that calls a service once per selected row: how many it changed,
    then each refusal the service raised, the first _REFUSALS_SHOWN of them by name."""
    done, refusals = 0, []
    for pk in queryset.values_list("pk", flat=True):
        try:
            change(pk)
        except OrderError as error:
            refusals.append(str(error))
        else:
            done += 1
    if done:
        model_admin.message_user(request, f"{done} {noun}(s) {verb}.", messages.SUCCESS)
    for refusal in refusals[:_REFUSALS_SHOWN]:
        model_admin.message_user(request, f"Refused: {refusal}.", messages.WARNING)
    if len(refusals) > _REFUSALS_SHOWN:
        more = len(refusals) - _REFUSALS_SHOWN
        model_admin.message_user(request, f"{more} more {noun}(s) refused.", messages.WARNING)
