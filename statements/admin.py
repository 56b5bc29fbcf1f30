"""The statement outbox, read-only but for one decision: retrying a statement the mail
server refused for good (permission ``statements.retry_statement``), with the same
Message-ID, to the restaurant's address as it is now."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from outbox.admin import outbox_retry_selected
from statements.errors import StatementError
from statements.models import Statement
from statements.services import statement_retry

if TYPE_CHECKING:
    _StatementAdmin = admin.ModelAdmin[Statement]
else:  # ModelAdmin is generic only in django-stubs
    _StatementAdmin = admin.ModelAdmin


@admin.register(Statement)
class StatementAdmin(_StatementAdmin):
    list_display = (
        "message_id",
        "restaurant",
        "period_start",
        "recipient",
        "status",
        "attempts",
        "sent_at",
        "last_error",
    )
    list_filter = ("status",)
    search_fields = ("=message_id", "=recipient")
    list_select_related = ("restaurant",)
    actions = ("retry",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # written with its payout, never by hand

    def has_change_permission(self, request: HttpRequest, obj: Statement | None = None) -> bool:
        return False  # frozen: what was mailed is what is mailed again

    def has_delete_permission(self, request: HttpRequest, obj: Statement | None = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("statements.retry_statement")

    @admin.action(description="Retry the selected stopped statements (same Message-ID)", permissions=["retry"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Statement]) -> None:
        outbox_retry_selected(
            self,
            request,
            queryset,
            retry=lambda row_id, now: statement_retry(statement_id=row_id, now=now),
            refused=StatementError,
            done="{count} statements will be mailed again.",
        )
