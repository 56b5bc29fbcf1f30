"""The transfer outbox, read-only but for one decision: retrying a stopped transfer with
the same key (permission ``transfers.retry_transfer``). The frozen request is never
edited here: what was sent once is what is sent again."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from outbox.admin import OutboxAdmin, outbox_retry_action
from tiffin.admin_lists import BoundedPaginator
from transfers.errors import TransferError
from transfers.models import Transfer
from transfers.selectors import reconciliation_summary
from transfers.services import transfer_retry


@admin.register(Transfer)
class TransferAdmin(OutboxAdmin):
    list_display = (
        "idempotency_key",
        "restaurant",
        "amount",
        "destination_shown",
        "status",
        "provider_id",
        "attempts",
        "last_attempt_at",
        "next_attempt_at",
    )
    list_filter = ("status",)
    list_select_related = ("restaurant",)
    search_fields = ("=idempotency_key", "=provider_id", "=restaurant__id", "restaurant__name")
    paginator = BoundedPaginator
    show_full_result_count = False
    retry = outbox_retry_action(
        description="Retry the selected stopped transfers (same key, same request)",
        retry=lambda row_id, now: transfer_retry(transfer_id=row_id, now=now),
        refused=TransferError,
        done="{count} transfers will be sent again with their own key.",
    )
    fields = (
        "payout_link",
        "restaurant",
        "period_start",
        "amount",
        "destination",
        "idempotency_key",
        "transfer_group",
        "status",
        "provider_id",
        "attempts",
        "first_attempt_at",
        "last_attempt_at",
        "next_attempt_at",
        "sent_at",
        "last_error",
        "created_at",
    )
    readonly_fields = fields

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The list, with what the newest reconciliation found (``reconciliation_summary``)."""
        summary = reconciliation_summary()
        context: dict[str, Any] = {"reconciliation": summary, **(extra_context or {})}
        if summary is not None:
            context["reconciliation_url"] = reverse("admin:scheduling_jobrun_change", args=[summary.run_id])
            context["reconciliation_mismatches"] = sum(n for kind, n in summary.counts.items() if kind != "matched")
        return super().changelist_view(request, context)

    @admin.display(description="amount", ordering="amount_minor")
    def amount(self, transfer: Transfer) -> str:
        return f"{transfer.amount_minor} {transfer.currency} minor units"

    @admin.display(description="destination", ordering="destination")
    def destination_shown(self, transfer: Transfer) -> str:
        return transfer.destination or "(no provider account yet)"

    @admin.display(description="payout")
    def payout_link(self, transfer: Transfer) -> SafeString:
        url = reverse("admin:payouts_payout_change", args=[transfer.payout_id])
        return format_html('<a href="{}">payout {}</a>', url, transfer.payout_id)
