"""The statement outbox, read-only but for one decision: retrying a statement the mail
server refused for good (permission ``statements.retry_statement``), with the same
Message-ID, to the restaurant's address as it is now."""

from __future__ import annotations

from django.contrib import admin

from outbox.admin import OutboxAdmin, outbox_retry_action
from statements.errors import StatementError
from statements.models import Statement
from statements.services import statement_retry


@admin.register(Statement)
class StatementAdmin(OutboxAdmin):
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
    retry = outbox_retry_action(
        description="Retry the selected stopped statements (same Message-ID)",
        retry=lambda row_id, now: statement_retry(statement_id=row_id, now=now),
        refused=StatementError,
        done="{count} statements will be mailed again.",
    )
