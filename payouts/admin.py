"""The payout history, read-only for everyone.

Payouts are written once by the weekly job and never edited: a correction is a new
entry, not a change to an old one. So nobody, superusers included, may add, change or
delete a payout here; the pages are for looking, filtering, totalling and exporting.
"""

from __future__ import annotations

import csv
from datetime import date
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from orders.models import Restaurant
from payouts.models import Payout
from payouts.selectors import (
    payout_covered_orders,
    payout_csv_rows,
    payout_totals,
    payout_week_choices,
    payouts_of_week,
)
from tiffin.admin_lists import BoundedPaginator
from tiffin.money import money_text
from transfers.models import Transfer, TransferStatus

if TYPE_CHECKING:
    _PayoutAdmin = admin.ModelAdmin[Payout]
else:  # ModelAdmin is generic only in django-stubs
    _PayoutAdmin = admin.ModelAdmin

# The restaurant filter lists every restaurant only while there are this few; beyond
# that, filter by clicking a restaurant in the list (or search by name).
RESTAURANT_CHOICES_MAX = 50
WEEK_CHOICES = 12
COVERED_ORDERS_SHOWN = 20


class RestaurantFilter(admin.SimpleListFilter):
    title = "restaurant"
    parameter_name = "restaurant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        restaurants = Restaurant.objects.order_by("name", "id")
        if restaurants.count() > RESTAURANT_CHOICES_MAX:
            restaurants = restaurants.filter(id=self._id() or 0)
        # "#12", not "(12)": the admin's "Show counts" puts a count in parentheses.
        return [(str(r.pk), f"{r.name} #{r.pk}") for r in restaurants]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(restaurant_id=self._id()) if self.value() else queryset

    def _id(self) -> int | None:
        value = self.value()
        return int(value) if value and value.isdigit() else None


class WeekFilter(admin.SimpleListFilter):
    title = "business week (local Monday)"
    parameter_name = "week"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        weeks = payout_week_choices(count=WEEK_CHOICES)
        selected = self._monday()
        if selected is not None and selected not in weeks:
            weeks.append(selected)
        return [(monday.isoformat(), f"week of {monday:%a %d %b %Y}") for monday in weeks]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        monday = self._monday()
        if self.value() and monday is None:
            return queryset.none()  # a malformed date matches nothing rather than everything
        return payouts_of_week(payouts=queryset, monday=monday) if monday else queryset

    def _monday(self) -> date | None:
        try:
            return date.fromisoformat(self.value() or "")
        except ValueError:
            return None


class TransferStatusFilter(admin.SimpleListFilter):
    title = "transfer"
    parameter_name = "transfer"
    NONE = "none"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*TransferStatus.choices, (self.NONE, "No transfer (nothing to pay)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == self.NONE:
            return queryset.filter(transfer__isnull=True)
        return queryset.filter(transfer__status=self.value()) if self.value() else queryset


@admin.register(Payout)
class PayoutAdmin(_PayoutAdmin):
    # What a person looks for first, money before provenance, so the list fits 1,280 px:
    # the restaurant, its local week, the amounts, then the UTC bounds and the run.
    list_display = (
        "restaurant_link",
        "local_week",
        "gross_text",
        "commission_text",
        "net_text",
        "orders",
        "utc_bounds",
        "run_link",
    )
    list_filter = (
        RestaurantFilter,
        ("restaurant__timezone", admin.AllValuesFieldListFilter),
        WeekFilter,
        TransferStatusFilter,
    )
    list_select_related = ("restaurant",)
    search_fields = ("restaurant__name", "=restaurant__id")
    # The drill-down offers calendar days (payouts/.../change_list.html), payout_period_start
    # serves its MIN/MAX; the ledger is counted up to a limit, never a second COUNT(*).
    date_hierarchy = "period_start"
    paginator = BoundedPaginator
    show_full_result_count = False
    actions = ("export_csv",)
    fieldsets = (
        (None, {"fields": ("restaurant", "local_week", "utc_bounds", "hours")}),
        ("Amounts", {"fields": ("order_count", "gross_text", "commission_rate", "commission_text", "net_text")}),
        ("Written by", {"fields": ("run_link", "fence", "tzdata_version", "created_at")}),
        ("Transfer to the restaurant", {"fields": ("transfer_shown",)}),
        ("Orders it covers", {"fields": ("covered_orders",)}),
    )
    readonly_fields = (
        "restaurant",
        "local_week",
        "utc_bounds",
        "hours",
        "order_count",
        "gross_text",
        "commission_rate",
        "commission_text",
        "net_text",
        "run_link",
        "fence",
        "tzdata_version",
        "created_at",
        "transfer_shown",
        "covered_orders",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Payout | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Payout | None = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The list, with the totals of every row the current filters select."""
        response = super().changelist_view(request, extra_context)
        if isinstance(response, TemplateResponse) and response.context_data and "cl" in response.context_data:
            response.context_data["payout_totals"] = payout_totals(payouts=response.context_data["cl"].queryset)
        return response

    @admin.action(description="Export the selected payouts as CSV")
    def export_csv(self, request: HttpRequest, queryset: QuerySet[Payout]) -> StreamingHttpResponse:
        writer = csv.writer(_Echo())
        rows = (writer.writerow(row) for row in payout_csv_rows(payouts=queryset))
        response = StreamingHttpResponse(rows, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="payouts.csv"'
        return response

    @admin.display(description="restaurant", ordering="restaurant__name")
    def restaurant_link(self, payout: Payout) -> SafeString:
        # Clicking a restaurant filters the list by it (the filter lists few restaurants).
        query = urlencode({RestaurantFilter.parameter_name: payout.restaurant_id})
        return format_html('<a href="?{}">{}</a>', query, payout.restaurant.name)

    @admin.display(description="local week", ordering="week_start_local")
    def local_week(self, payout: Payout) -> SafeString:
        """The local Monday the week starts on, in the restaurant's zone."""
        monday = f"{payout.week_start_local:%a %d %b %Y}"
        return format_html(
            '<span class="week">{}</span> <span class="zone">({})</span>', monday, payout.restaurant.timezone
        )

    # The amounts as every command prints them (tiffin.money.money_text), on the list and the
    # payout's page alike; a column still sorts by its Decimal field. Methods of their own:
    # the admin shows a model field named "gross" itself, never a method of the same name.
    @admin.display(description="gross", ordering="gross")
    def gross_text(self, payout: Payout) -> str:
        return money_text(payout.gross)

    @admin.display(description="commission", ordering="commission")
    def commission_text(self, payout: Payout) -> str:
        return money_text(payout.commission)

    @admin.display(description="net", ordering="net")
    def net_text(self, payout: Payout) -> str:
        return money_text(payout.net)

    @admin.display(description="orders", ordering="order_count")
    def orders(self, payout: Payout) -> int:
        return payout.order_count

    @admin.display(description="period (UTC)", ordering="period_start")
    def utc_bounds(self, payout: Payout) -> str:
        """The week's bounds in UTC, and its length when it is not 168 hours."""
        hours = self.hours(payout)
        length = "" if hours == "168" else f" ({hours} h)"
        return f"{payout.period_start:%Y-%m-%d %H:%M} to {payout.period_end:%Y-%m-%d %H:%M} UTC{length}"

    @admin.display(description="hours")
    def hours(self, payout: Payout) -> str:
        # 168, or 167 / 169 in a week in which the restaurant's zone changes its clocks.
        return f"{(payout.period_end - payout.period_start).total_seconds() / 3600:g}"

    @admin.display(description="run", ordering="job_run_id")
    def run_link(self, payout: Payout) -> str | SafeString:
        if payout.job_run_id is None:
            return "-"
        try:
            url = reverse("admin:scheduling_jobrun_change", args=[payout.job_run_id])
        except NoReverseMatch:
            return f"run {payout.job_run_id}"
        return format_html('<a href="{}">run {}</a>', url, payout.job_run_id)

    @admin.display(description="transfer")
    def transfer_shown(self, payout: Payout) -> str | SafeString:
        """The payout's transfer: status, provider id, attempts and last error."""
        transfer = Transfer.objects.filter(payout_id=payout.pk).first()
        if transfer is None:
            return "none: a payout with nothing to pay has no transfer"
        return format_html(
            '<a href="{}">{}</a>: {}; provider id {}; {} attempts; last error: {}',
            reverse("admin:transfers_transfer_change", args=[transfer.pk]),
            transfer.idempotency_key,
            transfer.get_status_display(),
            transfer.provider_id or "none yet",
            transfer.attempts,
            transfer.last_error or "none",
        )

    @admin.display(description="orders")
    def covered_orders(self, payout: Payout) -> SafeString:
        """The orders of the restaurant delivered inside the payout's bounds."""
        orders = payout_covered_orders(payout=payout)
        count = orders.count()
        query = urlencode(
            {
                "restaurant__id__exact": str(payout.restaurant_id),
                "status__exact": "delivered",
                "delivered_at__gte": payout.period_start.isoformat(),
                "delivered_at__lt": payout.period_end.isoformat(),
            }
        )
        header = format_html(
            '{} delivered orders fall inside this week ({} when it was paid). <a href="{}?{}">List them all</a>',
            count,
            payout.order_count,
            reverse("admin:orders_order_changelist"),
            query,
        )
        rows = format_html_join(
            "",
            '<li><a href="{}">order {}</a>: {} delivered {} UTC</li>',
            (
                (
                    reverse("admin:orders_order_change", args=[o.pk]),
                    o.pk,
                    money_text(o.total),
                    f"{o.delivered_at:%Y-%m-%d %H:%M}",
                )
                for o in orders[:COVERED_ORDERS_SHOWN]
            ),
        )
        more = f" and {count - COVERED_ORDERS_SHOWN} more" if count > COVERED_ORDERS_SHOWN else ""
        # The admin's form CSS indents a list in a field by the label's 170 px; this one is under its heading.
        return format_html('{}<ul style="margin-left: 0; padding-left: 1.5em">{}</ul>{}', header, rows, more)


class _Echo:
    """A file-like object whose write returns the line, for streaming csv.writer output."""

    def write(self, value: str) -> str:
        return value
