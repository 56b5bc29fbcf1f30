"""The statement outbox, read-only: what was mailed to whom, and what is still waiting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.http import HttpRequest

from statements.models import Statement

if TYPE_CHECKING:
    _StatementAdmin = admin.ModelAdmin[Statement]
else:  # ModelAdmin is generic only in django-stubs
    _StatementAdmin = admin.ModelAdmin


@admin.register(Statement)
class StatementAdmin(_StatementAdmin):
    list_display = ("message_id", "restaurant", "period_start", "recipient", "status", "attempts", "sent_at")
    list_filter = ("status",)
    search_fields = ("=message_id", "=recipient")
    list_select_related = ("restaurant",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # written with its payout, never by hand

    def has_change_permission(self, request: HttpRequest, obj: Statement | None = None) -> bool:
        return False  # frozen: what was mailed is what is mailed again

    def has_delete_permission(self, request: HttpRequest, obj: Statement | None = None) -> bool:
        return False
