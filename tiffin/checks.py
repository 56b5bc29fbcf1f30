"""System checks for project-wide invariants."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_time_zone_is_utc(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse to start unless storage and computation are in UTC.

    Every schedule, claim key and payout bound is computed in UTC; a non-UTC
    ``TIME_ZONE`` or naive datetimes would shift them by the server's offset.
    """
    errors = []
    if settings.TIME_ZONE != "UTC":
        errors.append(
            Error(
                f"TIME_ZONE is {settings.TIME_ZONE!r}; Tiffin requires 'UTC'.",
                hint="Local time belongs to restaurants and schedules, never to the server.",
                id="tiffin.E001",
            )
        )
    if not settings.USE_TZ:
        errors.append(Error("USE_TZ is off; Tiffin requires aware datetimes.", id="tiffin.E002"))
    return errors
