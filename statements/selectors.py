"""Reads of the statement outbox."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from statements.models import Statement, StatementStatus


def statements_waiting_with_recipient() -> list[tuple[int, str]]:
    """(id, address) of each statement that waits for a recipient whose restaurant now
    has a statement email (index statement_status)."""
    waiting = Statement.objects.filter(status=StatementStatus.WAITING_RECIPIENT).exclude(restaurant__statement_email="")
    return list(waiting.order_by("id").values_list("id", "restaurant__statement_email"))


def statements_unsent_since(*, written_before: datetime) -> QuerySet[Statement]:
    """Statements written before ``written_before`` and still not sent (pending, or
    waiting for a recipient), oldest first (index statement_status: few rows are unsent)."""
    unsent = Statement.objects.exclude(status=StatementStatus.SENT).filter(created_at__lt=written_before)
    return unsent.order_by("created_at", "id")


def statements_stopped() -> QuerySet[Statement]:
    """The statements the mail server refused for good: a person fixes the address and
    retries them (index statement_status)."""
    return Statement.objects.filter(status=StatementStatus.STOPPED).order_by("id")
