"""Read-only payout history. Payouts are written once by the weekly job and never
edited, so nobody (superusers included) may add, change or delete one here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.http import HttpRequest

from payouts.models import Payout

if TYPE_CHECKING:
    _PayoutAdmin = admin.ModelAdmin[Payout]
else:  # ModelAdmin is generic only in django-stubs
    _PayoutAdmin = admin.ModelAdmin


@admin.register(Payout)
class PayoutAdmin(_PayoutAdmin):
    list_display = (
        "restaurant",
        "week_start_local",
        "period_start",
        "period_end",
        "order_count",
        "gross",
        "commission",
        "net",
        "fence",
        "created_at",
    )
    list_filter = ("restaurant__timezone", "week_start_local")
    list_select_related = ("restaurant",)
    search_fields = ("restaurant__name",)
    date_hierarchy = "period_start"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Payout | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Payout | None = None) -> bool:
        return False
