"""What the transfer and statement admins share: an outbox is read-only but for one
decision, retrying the selected stopped rows, each through its app's own retry."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tiffin import clock

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin

Action = Callable[[_ModelAdmin, HttpRequest, QuerySet[Any]], None]


class OutboxAdmin(_ModelAdmin):
    """An outbox's rows, read-only: each is written with its payout, never by hand, and
    frozen (what was sent is what is sent again). Its one action, ``retry``
    (``outbox_retry_action``), needs the permission the model declares for it,
    ``<app>.retry_<model>``."""

    actions = ("retry",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # written with its payout, never by hand

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # frozen: what was sent is what is sent again

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.retry_{self.opts.model_name}")


def outbox_retry_action(
    *, description: str, retry: Callable[[int, datetime], object], refused: type[Exception], done: str
) -> Action:
    """The admin action ``retry`` of an ``OutboxAdmin``: ``retry(id, now)`` each selected
    row; tell the user ``done`` (with ``{count}``) for those retried and the message of
    each ``refused`` one."""

    @admin.action(description=description, permissions=["retry"])
    def retry_selected(model_admin: _ModelAdmin, request: HttpRequest, queryset: QuerySet[Any]) -> None:
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

    return retry_selected
