"""The admin's one decision on an outbox row, shared by the transfer and statement
admins: retrying the selected stopped rows, each through its app's own retry."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tiffin import clock


def outbox_retry_selected(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    retry: Callable[[int, datetime], object],
    refused: type[Exception],
    done: str,
) -> None:
    """``retry(id, now)`` each selected row; tell the user ``done`` (with ``{count}``) for
    those retried and the message of each ``refused`` one."""
    now = clock.now()
    retried, refusals = 0, []
    for row_id in queryset.values_list("id", flat=True):
        try:
            retry(row_id, now)
            retried += 1
        except refused as error:
            refusals.append(str(error))
    if retried:
        model_admin.message_user(request, done.format(count=retried), messages.SUCCESS)
    for message in refusals:
        model_admin.message_user(request, message, messages.WARNING)
